// The collector end to end: real programs run under `fulcrum capture` (or with the injection
// variables set by hand), real rank files, the merged run read back through TraceReader.
//
// nvtx_threads uses plain NVTX the way any program does; fulcrum_ranks speaks the `fulcrum`
// domain under mpirun -np 4. Faults: a rank SIGKILLed mid-run, a full disk (a small tmpfs;
// skipped where it cannot be mounted), an existing capture directory, another NVTX tool.
// GPU tracing needs a GPU: its tests skip here and say why; on this kind of machine the
// no-GPU path is checked instead.
#include <QDir>
#include <QProcess>
#include <QProcessEnvironment>
#include <QScopeGuard>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "collectors/capture/capture.h"
#include "core/store/trace_reader.h"

using namespace fulcrum;

namespace {

const QString kBinaryDir = QStringLiteral(FULCRUM_BINARY_DIR);

QString fulcrum_binary() {
    return kBinaryDir + "/app/fulcrum";
}
QString nvtx_threads() {
    return kBinaryDir + "/tests/collectors/nvtx_threads";
}
QString fulcrum_ranks() {
    return kBinaryDir + "/tests/collectors/fulcrum_ranks";
}
QString injection_library() {
    return kBinaryDir + "/collectors/libfulcrum_inject.so";
}

struct Outcome {
    int exit_code = -1;
    QString out;
    QString err;
};

// The environment of a process started by nobody in particular: no launcher's rank, no
// profiler attached, no capture of our own.
QProcessEnvironment clean_environment() {
    QProcessEnvironment environment = QProcessEnvironment::systemEnvironment();
    for (const QString& name : environment.keys()) {
        // Kept: how mpirun starts its daemons and where it keeps its session files are the
        // machine's settings, not a rank's.
        if (name == "OMPI_MCA_plm_rsh_agent" || name == "OMPI_MCA_orte_tmpdir_base") {
            continue;
        }
        if (name.startsWith("OMPI_") || name.startsWith("PMI") || name.startsWith("SLURM_") ||
            name.startsWith("FULCRUM_") || name == "RANK" || name == "WORLD_SIZE" ||
            name == "NVTX_INJECTION64_PATH" || name == "CUDA_INJECTION64_PATH") {
            environment.remove(name);
        }
    }
    // Open MPI as root, more ranks than cores, waiting ranks yielding (docs/sources.md,
    // "Launchers").
    environment.insert("OMPI_ALLOW_RUN_AS_ROOT", "1");
    environment.insert("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    environment.insert("OMPI_MCA_rmaps_base_oversubscribe", "1");
    environment.insert("OMPI_MCA_mpi_yield_when_idle", "1");
    // A machine without ssh or rsh (a container, the GPU machines): mpirun refuses to start
    // even one-node jobs unless its remote-start agent exists, and never calls it for them.
    if (!environment.contains("OMPI_MCA_plm_rsh_agent") &&
        QStandardPaths::findExecutable("ssh").isEmpty() &&
        QStandardPaths::findExecutable("rsh").isEmpty()) {
        environment.insert("OMPI_MCA_plm_rsh_agent", "false");
    }
    return environment;
}

Outcome run(const QString& program, const QStringList& args, const QString& directory,
            const QProcessEnvironment& environment = clean_environment()) {
    QProcess process;
    process.setWorkingDirectory(directory);
    process.setProcessEnvironment(environment);
    process.start(program, args);
    if (!process.waitForFinished(60'000)) {
        process.kill();
        process.waitForFinished();
        return {-1, "", "did not finish: " + process.errorString()};
    }
    return {process.exitStatus() == QProcess::NormalExit ? process.exitCode() : -1,
            QString::fromUtf8(process.readAllStandardOutput()),
            QString::fromUtf8(process.readAllStandardError())};
}

QString describe(const Outcome& outcome) {
    return "exit " + QString::number(outcome.exit_code) + "\nstdout:\n" + outcome.out +
           "\nstderr:\n" + outcome.err;
}

int count_lines_containing(const QString& text, const QString& needle) {
    int count = 0;
    for (const QString& line : text.split('\n')) {
        count += line.contains(needle) ? 1 : 0;
    }
    return count;
}

// One event as the tests look at it: its name and args spelled out, and the name of the
// range it sits in on its lane.
struct SeenEvent {
    Event event;
    std::string name;
    std::string args;
    std::string parent;  // "" at top level
    std::int32_t rank = 0;
    std::string lane;
};

struct CapturedRun {
    std::vector<RankInfo> ranks;
    std::vector<LaneInfo> lanes;
    std::vector<SeenEvent> events;
    std::vector<WorkloadEntry> workload;
    std::string config;
    std::int64_t start_utc_ns = 0;  // merge makes event times relative to it
    bool nesting_ok = true;
    std::string nesting_problem;

    std::vector<const SeenEvent*> named(const std::string& name,
                                        std::optional<std::int32_t> rank = {}) const {
        std::vector<const SeenEvent*> found;
        for (const auto& e : events) {
            if (e.name == name && (!rank || e.rank == *rank)) {
                found.push_back(&e);
            }
        }
        return found;
    }
    const RankInfo* rank(std::int32_t number) const {
        for (const auto& r : ranks) {
            if (r.rank == number) {
                return &r;
            }
        }
        return nullptr;
    }
};

// Reads a run and checks that the ranges of every lane nest (push/pop ranges always do;
// the start/end ranges named in `overlapping` may not, and are left out of the check).
std::optional<CapturedRun> read_run(const QString& path,
                                    const std::set<std::string>& overlapping = {}) {
    auto reader = store::TraceReader::open(path.toStdString());
    if (!reader) {
        qWarning("%s", reader.error().message.c_str());
        return std::nullopt;
    }
    CapturedRun run;
    run.ranks = reader->ranks();
    run.lanes = reader->lanes();
    run.config = reader->run().config_json;
    run.start_utc_ns = reader->run().start_utc_ns;
    if (auto workload = reader->workload()) {
        run.workload = *workload;
    }
    for (const auto& lane : run.lanes) {
        std::vector<const SeenEvent*> open;  // ranges enclosing the current event
        std::vector<SeenEvent> lane_events;
        (void)reader->for_each_event(lane.id, [&](const Event& event) {
            SeenEvent seen;
            seen.event = event;
            seen.name = std::string(reader->string(event.name));
            seen.args = std::string(reader->string(event.args));
            seen.rank = lane.rank;
            seen.lane = lane.name;
            lane_events.push_back(std::move(seen));
            return true;
        });
        // Events arrive by start time, a parent before the children that start with it.
        std::vector<SeenEvent*> stack;
        for (auto& seen : lane_events) {
            const bool is_range = seen.event.kind != EventKind::mark;
            if (is_range && overlapping.contains(seen.name)) {
                continue;
            }
            while (!stack.empty() && stack.back()->event.end_ns <= seen.event.start_ns &&
                   !(seen.event.kind == EventKind::mark &&
                     stack.back()->event.end_ns == seen.event.start_ns)) {
                stack.pop_back();
            }
            if (!stack.empty()) {
                seen.parent = stack.back()->name;
                if (is_range && seen.event.end_ns > stack.back()->event.end_ns) {
                    run.nesting_ok = false;
                    run.nesting_problem =
                        seen.name + " overlaps " + stack.back()->name + " on lane " + lane.name;
                }
            }
            if (is_range) {
                stack.push_back(&seen);
            }
        }
        run.events.insert(run.events.end(), lane_events.begin(), lane_events.end());
    }
    return run;
}

// Open MPI leaves allocations behind at MPI_Finalize that LeakSanitizer reports in a
// sanitizer build, with or without the collector; the MPI ranks run without leak checks.
QProcessEnvironment mpi_environment() {
    QProcessEnvironment environment = clean_environment();
    const QString asan = environment.value("ASAN_OPTIONS");
    environment.insert("ASAN_OPTIONS",
                       asan.isEmpty() ? "detect_leaks=0" : asan + ":detect_leaks=0");
    return environment;
}

bool can_mount_tmpfs(const QString& where) {
    QDir().mkpath(where);
    return QProcess::execute("mount", {"-t", "tmpfs", "-o", "size=2m", "tmpfs", where}) == 0;
}

}  // namespace

class CollectorsTest : public QObject {
    Q_OBJECT

    QTemporaryDir work_;

    Outcome capture(const QStringList& args,
                    const QProcessEnvironment& environment = clean_environment()) {
        return run(fulcrum_binary(), QStringList{"capture"} + args, work_.path(), environment);
    }
    QString path(const QString& name) const { return work_.filePath(name); }

private slots:
    void initTestCase() {
        QVERIFY(work_.isValid());
        for (const QString& file : {fulcrum_binary(), nvtx_threads(), injection_library()}) {
            QVERIFY2(QFile::exists(file), qPrintable(file + " is not built"));
        }
    }

    void plainNvtxArrivesUnchanged() {
        const Outcome outcome = capture({"-o", "plain", "--", nvtx_threads(), "--iterations", "5"});
        QVERIFY2(outcome.exit_code == 0, qPrintable(describe(outcome)));
        QVERIFY(outcome.out.contains("done"));
        QVERIFY2(outcome.out.contains("ranks    1, all complete"), qPrintable(outcome.out));
        QVERIFY2(outcome.out.contains(QString::fromUtf8("grid     dp 1 × tp 1 × pp 1 × cp 1")),
                 qPrintable(outcome.out));

        const auto captured =
            read_run(path("plain/run.fulcrum"), {"handed over", "start-end range"});
        QVERIFY(captured);
        QVERIFY2(captured->nesting_ok, captured->nesting_problem.c_str());
        QCOMPARE(captured->ranks.size(), std::size_t(1));
        QVERIFY(captured->ranks[0].complete);
        // One process that no launcher placed: the grid of one rank, and the run says why.
        const RankInfo& alone = captured->ranks[0];
        QVERIFY(alone.dp == 0 && alone.tp == 0 && alone.pp == 0 && alone.cp == 0);
        auto plain = store::TraceReader::open(path("plain/run.fulcrum").toStdString());
        QVERIFY(plain.ok());
        auto log = plain->import_log();
        QVERIFY(log.ok());
        QVERIFY(std::any_of(log->begin(), log->end(), [](const ImportLogEntry& entry) {
            return entry.reason.find("the grid of one rank") != std::string::npos;
        }));

        std::map<std::string, LaneKind> lanes;
        for (const auto& lane : captured->lanes) {
            lanes[lane.name] = lane.kind;
        }
        // "trainer" was named after its first events (a rename), "data loader" before.
        QCOMPARE(lanes.size(), std::size_t(2));
        QVERIFY(lanes.contains("trainer") && lanes.contains("data loader"));

        struct Expected {
            std::string name;
            std::size_t count;
            std::string lane;
            std::string parent;
            EventKind kind;
            std::string args;
        };
        const std::string my_lib = R"({"domain":"my-lib"})";
        const std::vector<Expected> expected = {
            {"outer", 5, "trainer", "", EventKind::range, ""},
            {"inner A", 5, "trainer", "outer", EventKind::range, ""},
            {"registered op", 5, "trainer", "outer", EventKind::range, my_lib},
            {"wide \xc2\xb5s", 5, "trainer", "outer", EventKind::range, ""},
            {"start-end range", 1, "trainer", "", EventKind::range, ""},
            {"handed over", 1, "trainer", "", EventKind::range, ""},  // ended on the worker
            {"program start", 1, "trainer", "", EventKind::mark, ""},
            {"program end", 1, "trainer", "", EventKind::mark, ""},
            {"lib mark", 1, "trainer", "", EventKind::mark, my_lib},
            {"load batch", 5, "data loader", "", EventKind::range, ""},
            {"decode", 5, "data loader", "load batch", EventKind::range, ""},
        };
        std::size_t total = 0;
        for (const auto& want : expected) {
            const auto found = captured->named(want.name);
            QVERIFY2(found.size() == want.count, qPrintable(QString::fromStdString(want.name) +
                                                            ": " + QString::number(found.size())));
            for (const SeenEvent* e : found) {
                QCOMPARE(e->lane, want.lane);
                QCOMPARE(e->event.kind, want.kind);
                QCOMPARE(e->args, want.args);
                if (want.name != "handed over" && want.name != "start-end range") {
                    QCOMPARE(e->parent, want.parent);
                }
                QVERIFY(e->event.end_ns >= e->event.start_ns);
                QCOMPARE(e->event.category, Category::other);
            }
            total += want.count;
        }
        QCOMPARE(captured->events.size(), total);
        const SeenEvent* handed = captured->named("handed over").front();
        QVERIFY(handed->event.duration_ns() > 0);
    }

    // Eight threads at once, each crossing several buffer blocks: every event arrives, on its
    // thread's lane, nested and ordered as emitted, at times within the run's wall-clock
    // window (host events are on CLOCK_REALTIME's timeline, the counter's or the fallback's).
    void manyThreadsKeepTheirOrder_data() {
        QTest::addColumn<QString>("clock");
        QTest::newRow("counter") << "";
        QTest::newRow("realtime fallback") << "realtime";
    }
    void manyThreadsKeepTheirOrder() {
        QFETCH(QString, clock);
        constexpr int kThreads = 8;
        constexpr int kIterations = 3000;
        QProcessEnvironment environment = clean_environment();
        if (!clock.isEmpty()) {
            environment.insert("FULCRUM_CLOCK", clock);
        }
        const QString name = clock.isEmpty() ? "threads-counter" : "threads-" + clock;
        const std::int64_t launched_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                             std::chrono::system_clock::now().time_since_epoch())
                                             .count();
        const Outcome outcome =
            capture({"-o", name, "--", nvtx_threads(), "--iterations", QString::number(kIterations),
                     "--threads", QString::number(kThreads)},
                    environment);
        const std::int64_t finished_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                             std::chrono::system_clock::now().time_since_epoch())
                                             .count();
        QVERIFY2(outcome.exit_code == 0, qPrintable(describe(outcome)));
        const auto captured =
            read_run(path(name + "/run.fulcrum"), {"handed over", "start-end range"});
        QVERIFY(captured);
        QVERIFY2(captured->nesting_ok, captured->nesting_problem.c_str());
        QVERIFY(captured->ranks[0].complete);
        QCOMPARE(captured->named("outer").size(), std::size_t(kIterations));
        QCOMPARE(captured->named("decode").size(), std::size_t(kIterations));
        for (int t = 0; t < kThreads; ++t) {
            const std::string lane = "worker " + std::to_string(t);
            std::vector<const SeenEvent*> work, steps, ticks;
            for (const auto& e : captured->events) {
                if (e.lane != lane) {
                    continue;
                }
                (e.name == "work" ? work : e.name == "step" ? steps : ticks).push_back(&e);
            }
            QCOMPARE(work.size(), std::size_t(kIterations));
            QCOMPARE(steps.size(), std::size_t(kIterations));
            QCOMPARE(ticks.size(), std::size_t(kIterations));
            // Iteration i as emitted: work_i contains step_i, then tick_i, and ends before
            // work_i+1. Ties are allowed: a counter may advance in steps (AMD's by 10 ns), so
            // a mark right after a pop can carry the pop's time.
            for (std::size_t i = 0; i < work.size(); ++i) {
                const Event& w = work[i]->event;
                const Event& s = steps[i]->event;
                const Event& m = ticks[i]->event;
                const bool ordered =
                    w.start_ns <= s.start_ns && s.start_ns <= s.end_ns && s.end_ns <= m.start_ns &&
                    m.start_ns <= w.end_ns &&
                    (i + 1 == work.size() || w.end_ns <= work[i + 1]->event.start_ns);
                QVERIFY2(ordered, qPrintable(QString::fromStdString(lane) + ": iteration " +
                                             QString::number(i) + " out of order"));
            }
        }
        for (const auto& e : captured->events) {
            const std::int64_t start_utc_ns = captured->start_utc_ns + e.event.start_ns;
            const std::int64_t end_utc_ns = captured->start_utc_ns + e.event.end_ns;
            QVERIFY2(
                start_utc_ns >= launched_ns && end_utc_ns <= finished_ns,
                qPrintable(QString::fromStdString(e.name) + " at " + QString::number(start_utc_ns) +
                           " outside the run [" + QString::number(launched_ns) + ", " +
                           QString::number(finished_ns) + "]"));
        }
    }

    void forkedChildIsNotRecorded() {
        const Outcome outcome =
            capture({"-o", "fork", "--", nvtx_threads(), "--iterations", "1", "--fork"});
        QVERIFY2(outcome.exit_code == 0, qPrintable(describe(outcome)));
        // The child ran its atexit handlers (exit()), and neither hung nor crashed on the
        // parent's writer.
        QVERIFY2(outcome.out.contains("child exited 0"), qPrintable(describe(outcome)));
        const auto captured =
            read_run(path("fork/run.fulcrum"), {"handed over", "start-end range"});
        QVERIFY(captured);
        QCOMPARE(captured->ranks.size(), std::size_t(1));
        QVERIFY(captured->ranks[0].complete);
        QCOMPARE(captured->named("after fork").size(), std::size_t(1));
        QVERIFY(captured->named("in child").empty());
        QVERIFY(captured->named("child mark").empty());
        QCOMPARE(QDir(path("fork")).entryList({"rank-*.sqlite"}, QDir::Files).size(), 1);
    }

    void processesWithoutRanksTakeFreeNumbers() {
        const QString program = nvtx_threads() + " --iterations 2";
        const Outcome outcome =
            capture({"-o", "two", "--", "sh", "-c", program + " & " + program + "; wait"});
        QVERIFY2(outcome.exit_code == 0, qPrintable(describe(outcome)));
        QVERIFY2(outcome.out.contains("grid     unknown"), qPrintable(outcome.out));
        const auto captured = read_run(path("two/run.fulcrum"), {"handed over", "start-end range"});
        QVERIFY(captured);
        QCOMPARE(captured->ranks.size(), std::size_t(2));
        for (std::int32_t rank : {0, 1}) {
            QVERIFY(captured->rank(rank) != nullptr);
            QVERIFY(captured->rank(rank)->complete);
            // Two processes without a launcher are not placed: which grid they form is unsaid.
            QCOMPARE(captured->rank(rank)->dp, -1);
            QCOMPARE(captured->named("outer", rank).size(), std::size_t(2));
        }
    }

    void fulcrumDomainUnderMpirun() {
#ifndef FULCRUM_MPIRUN
        QSKIP("MPI was not found at configure time: fulcrum_ranks is not built");
#else
        const int steps = 3, microbatches = 4, world = 4;
        const Outcome outcome =
            capture({"-o", "mpi", "--", FULCRUM_MPIRUN, "-np", "4", fulcrum_ranks(), "--steps",
                     QString::number(steps), "--microbatches", QString::number(microbatches)},
                    mpi_environment());
        QVERIFY2(outcome.exit_code == 0, qPrintable(describe(outcome)));
        QVERIFY2(outcome.out.contains("ranks    4, all complete"), qPrintable(outcome.out));
        const auto captured = read_run(path("mpi/run.fulcrum"));
        QVERIFY(captured);
        QVERIFY2(captured->nesting_ok, captured->nesting_problem.c_str());

        QCOMPARE(captured->config,
                 std::string(R"({"balancer":"wlb","cp":1,"dp":2,"model":"tiny","pp":2,)"
                             R"("schedule":"1f1b","tp":1})"));
        QCOMPARE(captured->ranks.size(), std::size_t(world));
        std::vector<std::int64_t> first_sync, second_sync;
        for (std::int32_t r = 0; r < world; ++r) {
            const RankInfo* rank = captured->rank(r);
            QVERIFY(rank != nullptr);
            QVERIFY(rank->complete);
            QCOMPARE(rank->dp, r / 2);
            QCOMPARE(rank->pp, r % 2);
            QCOMPARE(rank->cp, 0);
            QCOMPARE(rank->tp, 0);
            QCOMPARE(rank->device, -1);
            QCOMPARE(rank->alignment, ClockAlignment::barrier_marks);
            QCOMPARE(rank->dropped_records, std::int64_t(0));

            const auto syncs = captured->named(std::string(kClockSyncMark), r);
            QCOMPARE(syncs.size(), std::size_t(2));
            QCOMPARE(syncs[0]->event.kind, EventKind::mark);
            first_sync.push_back(syncs[0]->event.start_ns);
            second_sync.push_back(syncs[1]->event.start_ns);

            const auto step_ranges = captured->named("step", r);
            QCOMPARE(step_ranges.size(), std::size_t(steps));
            std::set<std::int32_t> seen_steps;
            for (const SeenEvent* e : step_ranges) {
                QCOMPARE(e->event.category, Category::schedule);
                QCOMPARE(e->parent, std::string());
                seen_steps.insert(e->event.step);
            }
            QCOMPARE(seen_steps, (std::set<std::int32_t>{0, 1, 2}));

            for (const char* name : {"forward", "backward"}) {
                const auto ranges = captured->named(name, r);
                QCOMPARE(ranges.size(), std::size_t(steps * microbatches));
                std::set<std::pair<std::int32_t, std::int32_t> > step_mb;
                for (const SeenEvent* e : ranges) {
                    QCOMPARE(e->event.kind, EventKind::range);
                    QCOMPARE(e->event.category, Category::compute);
                    QCOMPARE(e->event.stage, std::int16_t(r % 2));
                    QCOMPARE(e->event.phase, name[0] == 'f' ? Phase::forward : Phase::backward);
                    QCOMPARE(e->parent, std::string("step"));
                    step_mb.emplace(e->event.step, e->event.microbatch);
                }
                QCOMPARE(step_mb.size(), std::size_t(steps * microbatches));
            }
            for (const SeenEvent* e : captured->named("attention", r)) {
                QCOMPARE(e->event.category, Category::attention);
                QCOMPARE(e->args, std::string(R"({"layer":"0"})"));
                QVERIFY(e->parent == "forward" || e->parent == "backward");
            }
            QCOMPARE(captured->named("attention", r).size(), std::size_t(2 * steps * microbatches));
            QCOMPARE(captured->named("mlp", r).size(), std::size_t(2 * steps * microbatches));
            for (const char* name : {"send activations", "send gradients"}) {
                const auto sends = captured->named(name, r);
                QCOMPARE(sends.size(), std::size_t(steps * microbatches));
                for (const SeenEvent* e : sends) {
                    QCOMPARE(e->event.kind, EventKind::collective);
                    QCOMPARE(e->event.category, Category::communication);
                    QCOMPARE(e->event.bytes, std::int64_t(4096));
                    QVERIFY(e->event.microbatch >= 0);
                }
            }
            // A registered message with its bytes as the payload.
            const auto all_reduce = captured->named("dp all-reduce gradients", r);
            QCOMPARE(all_reduce.size(), std::size_t(steps));
            for (const SeenEvent* e : all_reduce) {
                QCOMPARE(e->event.kind, EventKind::collective);
                QCOMPARE(e->event.bytes, std::int64_t(2048 * 4));
                QVERIFY(e->event.step >= 0);
                QCOMPARE(e->parent, std::string("step"));
            }
            const auto optimizer = captured->named("optimizer", r);
            QCOMPARE(optimizer.size(), std::size_t(steps));
            QCOMPARE(optimizer.front()->event.category, Category::optimizer);
            // Metadata marks fill rows, not events.
            QVERIFY(captured->named("fulcrum.rank", r).empty());
            QVERIFY(captured->named("fulcrum.workload", r).empty());
        }
        // Ranks leave a barrier within its latency: the k-th clock-sync marks line up.
        for (const auto* marks : {&first_sync, &second_sync}) {
            const auto [low, high] = std::minmax_element(marks->begin(), marks->end());
            QVERIFY2(*high - *low < 100'000'000, qPrintable("clock-sync marks spread over " +
                                                            QString::number(*high - *low) + " ns"));
        }

        QCOMPARE(captured->workload.size(), std::size_t(world * steps * microbatches * 2));
        std::set<std::tuple<std::int32_t, std::int32_t, std::int32_t> > cells;
        for (const auto& entry : captured->workload) {
            const int doc = static_cast<int>(entry.doc_id % 10);
            QCOMPARE(entry.doc_id, std::int64_t(entry.step * 100 + entry.microbatch * 10 + doc));
            QCOMPARE(entry.doc_length, 100 * (doc + 1) + entry.rank);
            QCOMPARE(entry.token_begin, 0);
            QCOMPARE(entry.token_end, entry.doc_length);
            QCOMPARE(entry.balancer, std::string("wlb"));
            cells.emplace(entry.rank, entry.step, entry.microbatch);
        }
        QCOMPARE(cells.size(), std::size_t(world * steps * microbatches));
#endif
    }

    void killedRankIsKeptAndMarkedIncomplete() {
#ifndef FULCRUM_MPIRUN
        QSKIP("MPI was not found at configure time: fulcrum_ranks is not built");
#else
        const Outcome outcome =
            capture({"-o", "killed", "--", FULCRUM_MPIRUN, "-np", "4", fulcrum_ranks(), "--steps",
                     "3", "--microbatches", "2", "--kill-rank", "2", "--kill-step", "1"},
                    mpi_environment());
        QVERIFY2(outcome.exit_code != 0, qPrintable(describe(outcome)));
        QVERIFY2(outcome.out.contains("INCOMPLETE"), qPrintable(describe(outcome)));
        const auto captured = read_run(path("killed/run.fulcrum"));
        QVERIFY2(captured, "the partial run must be readable");
        const RankInfo* killed = captured->rank(2);
        QVERIFY(killed != nullptr);
        QVERIFY(!killed->complete);
        QCOMPARE(killed->dp, 1);
        // Everything it did before the kill was committed: steps 0 and 1, whole.
        QCOMPARE(captured->named("step", 2).size(), std::size_t(2));
        QCOMPARE(captured->named("forward", 2).size(), std::size_t(4));
        QCOMPARE(captured->named("optimizer", 2).size(), std::size_t(2));
        QCOMPARE(captured->ranks.size(), std::size_t(4));
#endif
    }

    void fullDiskStopsRecordingNotTheProgram() {
        const QString mount_point = path("small-disk");
        if (!can_mount_tmpfs(mount_point)) {
            QSKIP("cannot mount a tmpfs here (needs root); the full-disk path is not tested");
        }
        auto unmount = qScopeGuard([&] { QProcess::execute("umount", {mount_point}); });
        QProcessEnvironment environment = clean_environment();
        environment.insert("NVTX_INJECTION64_PATH", injection_library());
        environment.insert("FULCRUM_CAPTURE_DIR", mount_point + "/capture");
        environment.insert("FULCRUM_GPU", "off");
        const Outcome outcome =
            run(nvtx_threads(), {"--flood", "300000", "--unique"}, work_.path(), environment);
        QVERIFY2(outcome.exit_code == 0, qPrintable(describe(outcome)));
        QVERIFY2(outcome.out.contains("done"), qPrintable(describe(outcome)));
        QVERIFY2(count_lines_containing(outcome.err, "fulcrum:") == 1 &&
                     count_lines_containing(outcome.err, "recording stopped") == 1 &&
                     outcome.err.contains("full"),
                 qPrintable(describe(outcome)));

        const auto captured = read_run(mount_point + "/capture/rank-0.sqlite");
        QVERIFY(captured);
        QVERIFY(!captured->events.empty());  // what was committed before the disk filled
        QCOMPARE(captured->ranks.size(), std::size_t(1));
        QVERIFY(!captured->ranks[0].complete);
    }

    void existingDirectoryIsRefusedWithoutForce() {
        QVERIFY(QDir().mkpath(path("used")));
        QFile notes(path("used/notes.txt"));
        QVERIFY(notes.open(QIODevice::WriteOnly));
        notes.write("mine\n");
        notes.close();
        Outcome outcome = capture({"-o", "used", "--", nvtx_threads()});
        QCOMPARE(outcome.exit_code, 2);
        QCOMPARE(count_lines_containing(outcome.err, "already holds files"), 1);
        QVERIFY2(!outcome.out.contains("done"), "the command must not run");

        outcome = capture({"-o", "used", "--force", "--", nvtx_threads(), "--iterations", "1"});
        QVERIFY2(outcome.exit_code == 0, qPrintable(describe(outcome)));
        // A second capture into it replaces the first, and leaves other files alone.
        outcome = capture({"-o", "used", "--force", "--", nvtx_threads(), "--iterations", "3"});
        QVERIFY2(outcome.exit_code == 0, qPrintable(describe(outcome)));
        QVERIFY(QFile::exists(path("used/notes.txt")));
        const auto captured =
            read_run(path("used/run.fulcrum"), {"handed over", "start-end range"});
        QVERIFY(captured);
        QCOMPARE(captured->named("outer").size(), std::size_t(3));
    }

    void noGpuMeansNvtxOnly() {
        if (collect::gpu_present()) {
            QSKIP("this machine has a GPU; the no-GPU path is checked on machines without one");
        }
        Outcome outcome = capture({"-o", "gpu-auto", "--gpu", "auto", "--", nvtx_threads()});
        QVERIFY2(outcome.exit_code == 0, qPrintable(describe(outcome)));
        // Said once for all ranks: "no GPU found; ..." where CUPTI is built in, "libcupti was
        // not found; ..." in a build without the CUDA toolkit.
        QCOMPARE(count_lines_containing(outcome.err, "GPU tracing off, NVTX capture on"), 1);
        const auto statuses = collect::read_rank_statuses(path("gpu-auto").toStdString());
        QCOMPARE(statuses.size(), std::size_t(1));
        QVERIFY2(statuses[0].gpu == "none" || statuses[0].gpu == "unavailable",
                 statuses[0].gpu.c_str());
        QCOMPARE(statuses[0].state, std::string("closed"));

        outcome = capture({"-o", "gpu-off", "--gpu", "off", "--", nvtx_threads()});
        QVERIFY2(outcome.exit_code == 0, qPrintable(describe(outcome)));
        QVERIFY(!outcome.err.contains("GPU"));

        outcome = capture({"-o", "gpu-on", "--gpu", "on", "--", nvtx_threads()});
        QCOMPARE(outcome.exit_code, 2);
        QVERIFY2(outcome.err.contains("no usable GPU"), qPrintable(describe(outcome)));
        QVERIFY(!QDir(path("gpu-on")).exists());
    }

    void gpuWorkIsRecorded() {
        if (!collect::gpu_present()) {
            QSKIP(
                "needs a GPU: kernels, copies and API calls come from CUPTI, which has "
                "nothing to trace on a machine without one");
        }
        const QString program = kBinaryDir + "/tests/collectors/cuda_work";
        if (!QFile::exists(program)) {
            QSKIP("cuda_work is built only when the CUDA toolkit is found");
        }
        const Outcome outcome = capture({"-o", "gpu", "--gpu", "on", "--", program});
        QVERIFY2(outcome.exit_code == 0, qPrintable(describe(outcome)));
        const auto captured = read_run(path("gpu/run.fulcrum"));
        QVERIFY(captured);
        std::map<EventKind, int> kinds;
        bool kernel_has_step = false;
        bool stream_named = false;
        const SeenEvent* range = nullptr;
        for (const auto& e : captured->events) {
            if (e.event.kind == EventKind::range && e.event.step == 7) {
                range = &e;
            }
        }
        QVERIFY2(range != nullptr, "the NVTX range of step 7 was not recorded");
        bool api_inside_range = false;
        for (const auto& e : captured->events) {
            ++kinds[e.event.kind];
            if (e.event.kind == EventKind::kernel && e.event.step == 7) {
                kernel_has_step = true;
                QCOMPARE(e.event.microbatch, std::int32_t(2));
            }
            // CUPTI's thread ids are the NVTX lanes' (gettid), so a runtime call made inside
            // the range sits on the range's lane, nested in it.
            if (e.event.kind == EventKind::api && e.name == "cudaMemcpyAsync") {
                api_inside_range |= e.lane == range->lane && e.parent == range->name;
            }
            if (e.event.kind == EventKind::memcpy) {
                QVERIFY(e.event.bytes > 0);
                QVERIFY(e.event.copy_kind == CopyKind::host_to_device ||
                        e.event.copy_kind == CopyKind::device_to_host);
            }
        }
        for (const auto& lane : captured->lanes) {
            stream_named |= lane.kind == LaneKind::gpu_stream && lane.name == "compute stream";
        }
        QVERIFY2(kinds[EventKind::kernel] > 0, "no kernel records");
        QVERIFY2(kinds[EventKind::memcpy] >= 2, "no copies");
        QVERIFY2(kinds[EventKind::memset] >= 1, "no memset");
        QVERIFY2(kinds[EventKind::api] > 0, "no runtime/driver API records");
        QVERIFY2(kernel_has_step, "kernels did not get step 7 through external correlation");
        QVERIFY2(api_inside_range, "cudaMemcpyAsync is not on the NVTX range's thread lane");
        QVERIFY2(stream_named, "nvtxNameCudaStreamA did not name the stream's lane");
    }

    void anotherNvtxToolIsLeftAlone() {
        QProcessEnvironment environment = clean_environment();
        environment.insert("NVTX_INJECTION64_PATH",
                           "/opt/nvidia/nsight-systems/libToolsInjection64.so");
        const Outcome outcome = capture({"-o", "other-tool", "--", nvtx_threads()}, environment);
        QVERIFY2(outcome.exit_code == 0, qPrintable(describe(outcome)));
        QVERIFY(outcome.out.contains("done"));
        QCOMPARE(count_lines_containing(outcome.err, "steps aside"), 1);
        QVERIFY(!QDir(path("other-tool")).exists());
    }

    void withoutCaptureDirectoryTheLibraryDeclines() {
        QProcessEnvironment environment = clean_environment();
        environment.insert("NVTX_INJECTION64_PATH", injection_library());
        const Outcome outcome = run(nvtx_threads(), {}, work_.path(), environment);
        QVERIFY2(outcome.exit_code == 0, qPrintable(describe(outcome)));
        QVERIFY(outcome.out.contains("done"));
        QCOMPARE(count_lines_containing(outcome.err, "FULCRUM_CAPTURE_DIR is not set"), 1);
    }

    void failingCommandKeepsItsStatusAndItsRun() {
        const Outcome outcome = capture(
            {"-o", "failing", "--", "sh", "-c", nvtx_threads() + " --iterations 1; exit 5"});
        QCOMPARE(outcome.exit_code, 5);
        QVERIFY(QFile::exists(path("failing/run.fulcrum")));
        const auto captured =
            read_run(path("failing/run.fulcrum"), {"handed over", "start-end range"});
        QVERIFY(captured);
        QCOMPARE(captured->named("outer").size(), std::size_t(1));

        const Outcome silent = capture({"-o", "silent", "--", "sh", "-c", "exit 0"});
        QCOMPARE(silent.exit_code, 2);
        QCOMPARE(count_lines_containing(silent.err, "nothing was recorded"), 1);
        // A command that fails before recording: its status, and the error says it failed.
        const Outcome early = capture({"-o", "early", "--", "sh", "-c", "exit 7"});
        QCOMPARE(early.exit_code, 7);
        QCOMPARE(count_lines_containing(early.err, "exited with status 7 before any"), 1);
    }

    void badUsage_data() {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("message");
        QTest::newRow("no --") << QStringList{"-o", "x", nvtx_threads()} << "after `--`";
        QTest::newRow("no command") << QStringList{"-o", "x", "--"} << "after `--`";
        QTest::newRow("not found")
            << QStringList{"-o", "x", "--", "no-such-program-here"} << "not found in PATH";
        QTest::newRow("bad gpu") << QStringList{"--gpu", "maybe", "--", nvtx_threads()} << "maybe";
        QTest::newRow("bad gpu api")
            << QStringList{"--gpu-api", "some", "--", nvtx_threads()} << "some";
    }

    void badUsage() {
        QFETCH(QStringList, args);
        QFETCH(QString, message);
        const Outcome outcome = capture(args);
        QCOMPARE(outcome.exit_code, 2);
        QVERIFY2(outcome.err.contains(message), qPrintable(describe(outcome)));
        QVERIFY(!QDir(path("x")).exists());
    }

    void help() {
        const Outcome outcome = capture({"--help"});
        QCOMPARE(outcome.exit_code, 0);
        QVERIFY(outcome.out.contains("--gpu"));
        QVERIFY(outcome.out.contains("--force"));
    }
};

QTEST_GUILESS_MAIN(CollectorsTest)
#include "test_collectors.moc"
