#include "app/ui/rerun.h"

#include <QDir>
#include <QFileInfo>
#include <QRegularExpression>
#include <QSet>
#include <QStandardPaths>

#include "app/launch/command_line.h"

namespace fulcrum::ui {

QStringList balancer_names() {
    return {"fixed", "ilp", "wlb"};
}
QStringList cp_shard_names() {
    return {"contiguous", "zigzag", "per-doc", "adaptive"};
}
QStringList schedule_names() {
    return {"gpipe", "1f1b", "interleaved", "zb-h1"};
}

QStringList split_shell_words(const QString& command) {
    QStringList words;
    QString word;
    bool in_word = false;
    for (qsizetype i = 0; i < command.size(); ++i) {
        const QChar c = command[i];
        if (c == '\'') {
            in_word = true;
            const qsizetype end = command.indexOf('\'', i + 1);
            const qsizetype stop = end < 0 ? command.size() : end;
            word += command.mid(i + 1, stop - i - 1);
            i = stop;
        } else if (c == '"') {
            in_word = true;
            for (++i; i < command.size() && command[i] != '"'; ++i) {
                if (command[i] == '\\' && i + 1 < command.size()) {
                    ++i;
                }
                word += command[i];
            }
        } else if (c == '\\' && i + 1 < command.size()) {
            in_word = true;
            word += command[++i];
        } else if (c.isSpace()) {
            if (in_word) {
                words << word;
                word.clear();
                in_word = false;
            }
        } else {
            in_word = true;
            word += c;
        }
    }
    if (in_word) {
        words << word;
    }
    return words;
}

QStringList with_option(QStringList argv, const QString& option, const QString& value) {
    bool found = false;
    const QString joined = option + '=';
    for (qsizetype i = 0; i < argv.size(); ++i) {
        if (argv[i] == option) {
            found = true;
            if (i + 1 < argv.size()) {
                argv[i + 1] = value;
            } else {
                argv << value;
            }
            ++i;
        } else if (argv[i].startsWith(joined)) {
            found = true;
            argv[i] = joined + value;
        }
    }
    if (!found) {
        argv << option << value;
    }
    return argv;
}

QStringList without_option(QStringList argv, const QString& option) {
    const QString joined = option + '=';
    for (qsizetype i = 0; i < argv.size();) {
        if (argv[i] == option) {
            argv.remove(i, std::min<qsizetype>(2, argv.size() - i));
        } else if (argv[i].startsWith(joined)) {
            argv.remove(i);
        } else {
            ++i;
        }
    }
    return argv;
}

int engine_word(const QStringList& argv) {
    for (qsizetype i = 0; i < argv.size(); ++i) {
        if (QFileInfo(argv[i]).fileName() == QLatin1String("fulcrum-train")) {
            return int(i);
        }
    }
    return -1;
}

namespace {

bool is_executable_file(const QString& path) {
    const QFileInfo info(path);
    return info.exists() && info.isFile() && info.isExecutable();
}

}  // namespace

QString locate_engine(const QString& recorded, const QString& app_dir) {
    if (!recorded.isEmpty() && recorded.contains('/') && is_executable_file(recorded)) {
        return QFileInfo(recorded).absoluteFilePath();
    }
    const QString built = QDir(app_dir).filePath("../../engine/fulcrum-train");
    if (is_executable_file(built)) {
        return QFileInfo(built).canonicalFilePath();
    }
    return QStandardPaths::findExecutable("fulcrum-train");
}

QString locate_fulcrum(const QString& app_dir) {
    const QString built = QDir(app_dir).filePath("../fulcrum");
    if (is_executable_file(built)) {
        return QFileInfo(built).canonicalFilePath();
    }
    return QStandardPaths::findExecutable("fulcrum");
}

namespace {

// The options a plan candidate sets (RerunChoice::layout), all dropped from the recorded
// command before the candidate's are appended, so that none of the run's survives.
constexpr const char* kLayoutOptions[] = {
    "--dp",          "--tp", "--pp", "--cp", "--micro-batches", "--recompute", "--virtual-stages",
    "--stage-layers"};

QStringList with_layout(QStringList options, const QStringList& layout) {
    if (layout.isEmpty()) {
        return options;
    }
    for (const char* option : kLayoutOptions) {
        options = without_option(options, option);
    }
    options.removeAll(QStringLiteral("--sequence-parallel"));
    return options + layout;
}

// mpirun's -np / -n / --np set to `world` (0: as recorded).
QStringList with_launcher_ranks(QStringList launcher, int world) {
    for (qsizetype i = 0; world > 0 && i + 1 < launcher.size(); ++i) {
        if (launcher[i] == "-np" || launcher[i] == "-n" || launcher[i] == "--np") {
            launcher[i + 1] = QString::number(world);
        }
    }
    return launcher;
}

int layout_value(const QStringList& layout, const QString& option, int fallback) {
    const qsizetype at = layout.indexOf(option);
    return at >= 0 && at + 1 < layout.size() ? layout[at + 1].toInt() : fallback;
}

}  // namespace

CandidateRerun candidate_rerun(const plan::Candidate& c, const RerunPlan& plan,
                               int recorded_world) {
    CandidateRerun rerun;
    const int world = c.layout.grid.world();
    if (!plan.capture_here) {
        rerun.why_not = QString("the open run cannot be captured again here: %1").arg(plan.why_not);
    } else if (world > recorded_world) {
        rerun.why_not =
            QString("it needs %1 ranks; the open run ran %2 here").arg(world).arg(recorded_world);
    }
    RerunChoice& choice = rerun.choice;
    choice.balancer = balance::balancer_name(c.balancer);
    choice.cp_shard = balance::cp_sharding_name(c.sharding);
    choice.schedule = parallel::schedule_name(c.layout.schedule);
    choice.world = world;
    // The plan's own layout flags (app/launch/command_line.h) but the schedule, which the
    // re-run sets apart (RerunChoice::schedule).
    std::vector<std::string> layout = launch::layout_arguments(c);
    for (auto at = layout.begin(); at + 1 < layout.end(); ++at) {
        if (*at == "--schedule") {
            layout.erase(at, at + 2);
            break;
        }
    }
    for (const std::string& word : layout) {
        choice.layout << QString::fromStdString(word);
    }
    return rerun;
}

QStringList rerun_argv(const QStringList& recorded, const RerunChoice& choice, int pp, int cp,
                       const QString& engine) {
    // A plan candidate's layout decides which of its schedule and sharding apply.
    pp = layout_value(choice.layout, "--pp", pp);
    cp = layout_value(choice.layout, "--cp", cp);
    QStringList argv = recorded;
    const int at = engine_word(argv);
    if (at >= 0 && !engine.isEmpty()) {
        argv[at] = engine;
    }
    // Only the engine's own options are rewritten: mpirun's words before it stay as they are.
    const QStringList launcher = at >= 0 ? argv.mid(0, at + 1) : QStringList{};
    QStringList options = at >= 0 ? argv.mid(at + 1) : argv;
    if (!choice.balancer.isEmpty()) {
        options = with_option(options, "--balancer", choice.balancer);
    }
    if (cp > 1 && !choice.cp_shard.isEmpty()) {
        options = with_option(options, "--cp-shard", choice.cp_shard);
    }
    if (pp > 1 && !choice.schedule.isEmpty()) {
        options = with_option(options, "--schedule", choice.schedule);
        const bool chunked = options.contains("--virtual-stages") ||
                             !options.filter(QRegularExpression("^--virtual-stages=")).isEmpty();
        if (choice.schedule == QLatin1String("interleaved")) {
            if (!chunked) {
                options = with_option(options, "--virtual-stages", "2");
            }
        } else {
            options = without_option(options, "--virtual-stages");
        }
    }
    if (choice.same_documents) {
        options = with_option(without_option(options, "--steps"), "--epochs", "1");
    }
    return with_launcher_ranks(launcher, choice.world) + with_layout(options, choice.layout);
}

RerunPlan plan_rerun(const views::OpenedRun& run, const QString& app_dir,
                     const QString& local_host) {
    RerunPlan plan;
    if (!run.trace) {
        plan.why_not = "the run has no trace";
        return plan;
    }
    if (run.trace->run.origin != RunOrigin::captured) {
        plan.why_not = run.trace->run.origin == RunOrigin::simulated
                           ? "it was simulated, not captured"
                           : "it was imported, not captured by fulcrum-train";
        return plan;
    }
    plan.argv = split_shell_words(QString::fromStdString(run.trace->run.command));
    const int at = engine_word(plan.argv);
    if (!run.rerunnable_here() || at < 0) {
        plan.why_not = "its command does not run fulcrum-train";
        return plan;
    }
    // A run whose ranks ran elsewhere was captured on a cluster: its launcher, hosts and
    // data are not here, so re-running it on this machine would measure something else.
    const QString host = local_host.section('.', 0, 0);
    QSet<QString> others;
    for (const auto& rank : run.trace->ranks) {
        const QString rank_host = QString::fromStdString(rank.info.host).section('.', 0, 0);
        if (!rank_host.isEmpty() && rank_host.compare(host, Qt::CaseInsensitive) != 0) {
            others.insert(rank_host);
        }
    }
    if (!others.isEmpty()) {
        QStringList names = others.values();
        names.sort();
        plan.why_not = QString("it was captured on %1, not on this machine (%2)")
                           .arg(names.join(", "), local_host);
        return plan;
    }
    plan.engine = locate_engine(plan.argv[at], app_dir);
    if (plan.engine.isEmpty()) {
        plan.why_not = QString("fulcrum-train ('%1') is not on this machine").arg(plan.argv[at]);
        return plan;
    }
    if (at > 0 && QStandardPaths::findExecutable(plan.argv[0]).isEmpty() &&
        !is_executable_file(plan.argv[0])) {
        plan.why_not = QString("its launcher '%1' is not on this machine").arg(plan.argv[0]);
        return plan;
    }
    plan.capture_here = true;
    return plan;
}

QString unique_output_path(const QString& run_path, const QString& stem, const QString& suffix) {
    // A merged capture is <folder>/run.fulcrum: the new run goes beside the folder.
    const QFileInfo run(run_path);
    QDir base = run.dir();
    if (run.fileName() == QLatin1String("run.fulcrum")) {
        base.cdUp();
    }
    if (!QFileInfo(base.absolutePath()).isWritable()) {
        base = QDir(QDir::tempPath());
    }
    // "-sim-wlb.fulcrum": the counter goes before the extension.
    const qsizetype dot = suffix.lastIndexOf('.');
    const QString name = dot > 0 ? suffix.left(dot) : suffix;
    const QString extension = dot > 0 ? suffix.mid(dot) : QString();
    QString candidate = base.filePath(stem + name + extension);
    for (int n = 2; QFileInfo::exists(candidate); ++n) {
        candidate = base.filePath(QString("%1%2-%3%4").arg(stem, name).arg(n).arg(extension));
    }
    return QDir::cleanPath(candidate);
}

QStringList capture_arguments(const QString& out_dir, const QStringList& engine_argv) {
    return QStringList{"capture", "-o", out_dir, "--"} + engine_argv;
}

QStringList simulate_arguments(const QString& run_path, const RerunChoice& choice, int pp, int cp,
                               const QString& out_file) {
    QStringList args{"simulate", "--calibrate", run_path};
    if (!choice.balancer.isEmpty()) {
        args << "--balancer" << choice.balancer;
    }
    if (cp > 1 && !choice.cp_shard.isEmpty()) {
        args << "--cp-shard" << choice.cp_shard;
    }
    if (pp > 1 && !choice.schedule.isEmpty()) {
        args << "--schedule" << choice.schedule;
        if (choice.schedule == QLatin1String("interleaved")) {
            args << "--virtual-stages"
                 << "2";  // as rerun_argv gives the engine
        }
    }
    if (choice.same_documents) {
        args << "--epochs"
             << "1";
    }
    args << "--progress"
         << "-o" << out_file;
    return args;
}

double progress_from_line(const QString& line, int steps) {
    static const QRegularExpression step(R"(^step\s+(\d+)\s*\|)");
    static const QRegularExpression percent(R"(^[a-z][\w ]*\s(\d{1,3})%\s*$)");
    if (const auto m = step.match(line); m.hasMatch() && steps > 0) {
        return std::min(1.0, (m.captured(1).toDouble() + 1) / steps);
    }
    if (const auto m = percent.match(line); m.hasMatch()) {
        return std::min(1.0, m.captured(1).toDouble() / 100.0);
    }
    return -1;
}

}  // namespace fulcrum::ui
