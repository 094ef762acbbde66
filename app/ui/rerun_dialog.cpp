#include "app/ui/rerun_dialog.h"

#include <QCheckBox>
#include <QComboBox>
#include <QCoreApplication>
#include <QDialogButtonBox>
#include <QDir>
#include <QFileInfo>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QRadioButton>
#include <QTimer>
#include <QVBoxLayout>

#include <sys/types.h>
#include <unistd.h>
#include <csignal>

namespace fulcrum::ui {
namespace {

QString or_unknown(const std::string& text) {
    return text.empty() ? QStringLiteral("unknown") : QString::fromStdString(text);
}

// Open MPI refuses to start as root unless told; the fixture script and a root container
// need the same switches. Set only when missing, and only for root.
QProcessEnvironment rerun_environment() {
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    if (geteuid() == 0) {
        const std::pair<const char*, const char*> root_mpi[] = {
            {"OMPI_ALLOW_RUN_AS_ROOT", "1"},
            {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"},
            {"OMPI_MCA_rmaps_base_oversubscribe", "1"},
            {"OMPI_MCA_mpi_yield_when_idle", "1"},
        };
        for (const auto& [name, value] : root_mpi) {
            if (!env.contains(name)) {
                env.insert(name, value);
            }
        }
    }
    return env;
}

QString local_host_name() {
    char name[256] = {};
    ::gethostname(name, sizeof name - 1);
    return QString::fromLocal8Bit(name);
}

}  // namespace

RerunDialog::RerunDialog(views::RunPtr run, QWidget* parent, QString app_dir)
    : QDialog(parent),
      run_(std::move(run)),
      app_dir_(app_dir.isEmpty() ? QCoreApplication::applicationDirPath() : std::move(app_dir)) {
    setWindowTitle(tr("Re-run %1").arg(run_->title));
    plan_ = plan_rerun(*run_, app_dir_, local_host_name());
    fulcrum_ = locate_fulcrum(app_dir_);
    const RunConfig& config = run_->trace->config;

    auto* layout = new QVBoxLayout(this);
    const QString grid = config.grid_known ? tr("DP %1 × TP %2 × PP %3 × CP %4")
                                                 .arg(config.layout.grid.dp)
                                                 .arg(config.layout.grid.tp)
                                                 .arg(config.layout.grid.pp)
                                                 .arg(config.layout.grid.cp)
                                           : tr("grid unknown (no DP/TP/PP/CP coordinates)");
    auto* summary = new QLabel(
        tr("<b>%1</b>: %2; balancer %3, CP sharding %4, schedule %5")
            .arg(run_->title.toHtmlEscaped(), grid.toHtmlEscaped(), or_unknown(config.balancer),
                 or_unknown(config.cp_shard), or_unknown(schedule_text(config))),
        this);
    summary->setWordWrap(true);
    layout->addWidget(summary);

    auto* form = new QFormLayout;
    balancer_ = new QComboBox(this);
    balancer_->addItems(balancer_names());
    // The balancer to compare against is, by default, one the run did not use.
    for (const QString& name : balancer_names()) {
        if (name != QString::fromStdString(config.balancer)) {
            balancer_->setCurrentText(name);
            break;
        }
    }
    cp_shard_ = new QComboBox(this);
    cp_shard_->addItems(cp_shard_names());
    if (config.attention_chunk > 0) {
        cp_shard_->addItem("chunked");  // the run's attention chunks cut over its CP ranks
    }
    cp_shard_->setCurrentText(QString::fromStdString(config.cp_shard));
    cp_shard_->setEnabled(config.layout.grid.cp > 1);
    cp_shard_->setToolTip(config.layout.grid.cp > 1 ? QString()
                                                    : tr("The run has no context parallelism"));
    schedule_ = new QComboBox(this);
    schedule_->addItems(schedule_names());
    schedule_->setCurrentText(QString::fromStdString(schedule_text(config)));
    schedule_->setEnabled(config.layout.grid.pp > 1);
    schedule_->setToolTip(config.layout.grid.pp > 1 ? QString()
                                                    : tr("The run has no pipeline stages"));
    form->addRow(tr("&Balancer:"), balancer_);
    form->addRow(tr("CP &sharding:"), cp_shard_);
    form->addRow(tr("&Schedule:"), schedule_);
    layout->addLayout(form);
    same_documents_ = new QCheckBox(
        tr("Same documents: train one epoch, after re-running this run's own settings over "
           "the same epoch as the baseline, so tokens/s compares like for like"),
        this);
    layout->addWidget(same_documents_);

    capture_button_ = new QRadioButton(tr("Re-run here with fulcrum capture"), this);
    simulate_button_ =
        new QRadioButton(tr("Simulate instead (cost model fitted on this run)"), this);
    layout->addWidget(capture_button_);
    if (!plan_.capture_here) {
        auto* why = new QLabel(tr("Cannot re-run here: %1.").arg(plan_.why_not), this);
        why->setWordWrap(true);
        layout->addWidget(why);
    }
    layout->addWidget(simulate_button_);
    capture_button_->setEnabled(plan_.capture_here);
    (plan_.capture_here ? capture_button_ : simulate_button_)->setChecked(true);

    command_ = new QLineEdit(this);
    command_->setReadOnly(true);
    layout->addWidget(command_);
    bar_ = new QProgressBar(this);
    bar_->setRange(0, 1000);
    bar_->setValue(0);
    layout->addWidget(bar_);
    status_ = new QLabel(tr("Ready"), this);
    status_->setWordWrap(true);
    status_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(status_);
    last_line_ = new QLabel(this);
    last_line_->setTextFormat(Qt::PlainText);
    layout->addWidget(last_line_);
    log_ = new QPlainTextEdit(this);
    log_->setReadOnly(true);
    log_->setMaximumBlockCount(2000);
    log_->setFont(QFont(QStringLiteral("monospace")));
    layout->addWidget(log_, 1);

    auto* buttons = new QDialogButtonBox(this);
    start_button_ = buttons->addButton(tr("&Start"), QDialogButtonBox::AcceptRole);
    cancel_button_ = buttons->addButton(tr("Cancel run"), QDialogButtonBox::ActionRole);
    cancel_button_->setEnabled(false);
    auto* close = buttons->addButton(QDialogButtonBox::Close);
    layout->addWidget(buttons);
    connect(start_button_, &QPushButton::clicked, this, &RerunDialog::start);
    connect(cancel_button_, &QPushButton::clicked, this, [this] { cancel(); });
    connect(close, &QPushButton::clicked, this, &QDialog::reject);

    for (QComboBox* box : {balancer_, cp_shard_, schedule_}) {
        connect(box, &QComboBox::currentTextChanged, this, &RerunDialog::update_command);
    }
    connect(simulate_button_, &QRadioButton::toggled, this, &RerunDialog::update_command);
    connect(same_documents_, &QCheckBox::toggled, this, &RerunDialog::update_command);

    tick_ = new QTimer(this);
    tick_->setInterval(250);
    connect(tick_, &QTimer::timeout, this, [this] {
        if (state_ == State::running) {
            const qint64 s = elapsed_.elapsed() / 1000;
            status_->setText(tr("%1 — %2:%3 elapsed")
                                 .arg(cancel_requested_ ? tr("Cancelling") : tr("Running"))
                                 .arg(s / 60)
                                 .arg(s % 60, 2, 10, QChar('0')));
        }
    });
    update_command();
    resize(640, 480);
}

RerunDialog::~RerunDialog() {
    if (process_ && process_->state() != QProcess::NotRunning) {
        process_->disconnect(this);
        process_->terminate();
        if (!process_->waitForFinished(2000)) {
            kill_tree();
            process_->waitForFinished(2000);
        }
    }
}

void RerunDialog::set_choice(const RerunChoice& choice) {
    if (!choice.balancer.isEmpty()) {
        balancer_->setCurrentText(choice.balancer);
    }
    if (!choice.cp_shard.isEmpty()) {
        cp_shard_->setCurrentText(choice.cp_shard);
    }
    if (!choice.schedule.isEmpty()) {
        schedule_->setCurrentText(choice.schedule);
    }
    layout_ = choice.layout;
    world_ = choice.world;
    update_command();
}

RerunChoice RerunDialog::choice() const {
    return {balancer_->currentText(),
            cp_shard_->currentText(),
            schedule_->currentText(),
            same_documents_->isChecked(),
            layout_,
            world_};
}

void RerunDialog::set_same_documents(bool on) {
    same_documents_->setChecked(on);
}

bool RerunDialog::same_documents() const {
    return same_documents_->isChecked();
}

void RerunDialog::set_simulate(bool on) {
    (on || !plan_.capture_here ? simulate_button_ : capture_button_)->setChecked(true);
}

bool RerunDialog::simulate() const {
    return simulate_button_->isChecked();
}

QString RerunDialog::program() const {
    return fulcrum_;
}

QStringList RerunDialog::arguments() const {
    return arguments_for(choice());
}

// "-rerun-wlb", "-sim-wlb.fulcrum"; over one epoch "-epoch-wlb", the baseline's with the
// run's own balancer.
QString RerunDialog::suffix_for(const RerunChoice& choice) const {
    const QString balancer = choice.balancer.isEmpty()
                                 ? QString::fromStdString(run_->trace->config.balancer)
                                 : choice.balancer;
    if (simulate()) {
        return (choice.same_documents ? "-sim-epoch-" : "-sim-") + balancer + ".fulcrum";
    }
    return (choice.same_documents ? "-epoch-" : "-rerun-") + balancer;
}

QStringList RerunDialog::arguments_for(const RerunChoice& choice) const {
    const RunConfig& config = run_->trace->config;
    const QString stem = run_->title;
    if (simulate()) {
        const QString out =
            output_.isEmpty() ? unique_output_path(run_->path, stem, suffix_for(choice)) : output_;
        return simulate_arguments(run_->path, choice, config.layout.grid.pp, config.layout.grid.cp,
                                  out);
    }
    const QString dir = output_dir_.isEmpty()
                            ? unique_output_path(run_->path, stem, suffix_for(choice))
                            : output_dir_;
    return capture_arguments(dir, rerun_argv(plan_.argv, choice, config.layout.grid.pp,
                                             config.layout.grid.cp, plan_.engine));
}

void RerunDialog::update_command() {
    if (state_ == State::running) {
        return;
    }
    QStringList words{fulcrum_.isEmpty() ? QStringLiteral("fulcrum") : fulcrum_};
    words += arguments();
    command_->setText(words.join(' '));
}

void RerunDialog::start() {
    if (state_ == State::running) {
        return;
    }
    if (fulcrum_.isEmpty()) {
        set_state(State::failed, tr("The fulcrum command line tool was found neither next to "
                                    "fulcrum-ui nor on PATH."));
        return;
    }
    // Over the same documents the original settings run first, as the baseline: the original
    // run trained by steps, so it is no like-for-like reference.
    lines_.clear();
    log_->clear();
    last_line_->clear();
    cancel_requested_ = false;
    running_baseline_ = same_documents();
    RerunChoice baseline;  // the original run's settings, over the same documents
    baseline.same_documents = true;
    launch(running_baseline_ ? baseline : choice());
}

void RerunDialog::launch(const RerunChoice& choice) {
    const QString stem = run_->title;
    output_.clear();
    output_dir_.clear();
    if (simulate()) {
        output_ = unique_output_path(run_->path, stem, suffix_for(choice));
    } else {
        output_dir_ = unique_output_path(run_->path, stem, suffix_for(choice));
        output_ = QDir(output_dir_).filePath("run.fulcrum");
    }
    const QStringList args = arguments_for(choice);
    command_->setText(QStringList(QStringList{fulcrum_} + args).join(' '));

    partial_line_.clear();
    if (process_) {
        // launch() also runs from the baseline's finished signal: not deleted under it.
        process_->disconnect(this);
        process_->deleteLater();
    }
    process_ = new QProcess(this);
    process_->setProcessChannelMode(QProcess::MergedChannels);
    process_->setProcessEnvironment(rerun_environment());
    // Its own process group, so a kill reaches mpirun's ranks too, whatever they ignore.
    process_->setChildProcessModifier([] { ::setpgid(0, 0); });
    connect(process_, &QProcess::readyRead, this, &RerunDialog::read_output);
    connect(process_, &QProcess::finished, this, &RerunDialog::process_finished);
    connect(process_, &QProcess::errorOccurred, this, [this](QProcess::ProcessError error) {
        if (error == QProcess::FailedToStart) {
            set_state(State::failed,
                      tr("Could not start %1: %2").arg(fulcrum_, process_->errorString()));
        }
    });
    bar_->setRange(0, 0);  // busy until the tool says how far it is
    elapsed_.start();
    set_state(State::running, running_baseline_ ? tr("Running the baseline") : tr("Running"));
    log_->appendPlainText("$ " + command_->text());
    process_->start(fulcrum_, args);
}

void RerunDialog::cancel(int grace_ms) {
    if (state_ != State::running || !process_) {
        return;
    }
    cancel_requested_ = true;
    status_->setText(tr("Cancelling"));
    process_->terminate();
    QPointer<QProcess> process(process_);
    QTimer::singleShot(grace_ms, this, [this, process] {
        if (process && process == process_ && process->state() != QProcess::NotRunning) {
            kill_tree();
        }
    });
}

void RerunDialog::kill_tree() {
    if (process_ && process_->processId() > 0) {
        ::kill(-pid_t(process_->processId()), SIGKILL);
    }
}

void RerunDialog::read_output() {
    const QString text = partial_line_ + QString::fromLocal8Bit(process_->readAll());
    // Progress lines end in '\r' on a terminal; treat it as a line end too.
    QStringList parts = text.split(QRegularExpression("[\r\n]"));
    partial_line_ = parts.takeLast();
    const int steps = run_->trace->config.steps;
    for (QString& line : parts) {
        line = line.trimmed();
        if (line.isEmpty()) {
            continue;
        }
        lines_ << line;
        log_->appendPlainText(line);
        last_line_->setText(line.left(200));
        const double fraction = progress_from_line(line, steps);
        if (fraction >= 0) {
            bar_->setRange(0, 1000);
            bar_->setValue(int(fraction * 1000));
        }
    }
    if (lines_.size() > 2000) {
        lines_ = lines_.mid(lines_.size() - 1000);
    }
}

QString RerunDialog::last_lines(int count) const {
    return lines_.mid(std::max<qsizetype>(0, lines_.size() - count)).join('\n');
}

void RerunDialog::process_finished(int exit_code, QProcess::ExitStatus status) {
    if (state_ != State::running) {
        return;
    }
    read_output();
    if (!partial_line_.trimmed().isEmpty()) {
        lines_ << partial_line_.trimmed();
        log_->appendPlainText(partial_line_.trimmed());
        partial_line_.clear();
    }
    const QString seconds = QString::number(elapsed_.elapsed() / 1000.0, 'f', 1);
    if (cancel_requested_) {
        // A cancelled capture leaves rank files and no merged run: nothing worth keeping.
        if (!output_dir_.isEmpty()) {
            QDir(output_dir_).removeRecursively();
        } else if (!output_.isEmpty()) {
            QFile::remove(output_);
        }
        set_state(State::cancelled, tr("Cancelled after %1 s.").arg(seconds));
        return;
    }
    if (status != QProcess::NormalExit || exit_code != 0 || !QFileInfo::exists(output_)) {
        const QString how = status != QProcess::NormalExit
                                ? tr("crashed")
                                : tr("exited with status %1").arg(exit_code);
        set_state(State::failed, tr("%1 %2 after %3 s:\n%4")
                                     .arg(simulate() ? "fulcrum simulate" : "fulcrum capture", how,
                                          seconds, last_lines(8)));
        return;
    }
    if (running_baseline_) {
        running_baseline_ = false;
        log_->appendPlainText(tr("baseline done in %1 s: %2").arg(seconds, output_));
        emit baseline_ready(output_);
        launch(choice());
        return;
    }
    bar_->setRange(0, 1000);
    bar_->setValue(1000);
    set_state(State::succeeded, tr("Done in %1 s: %2").arg(seconds, output_));
    emit run_ready(output_, same_documents() ? nullptr : run_);
}

void RerunDialog::set_state(State state, const QString& text) {
    state_ = state;
    status_->setText(text);
    const bool running = state == State::running;
    start_button_->setEnabled(!running);
    cancel_button_->setEnabled(running);
    for (QWidget* w : {static_cast<QWidget*>(balancer_), static_cast<QWidget*>(simulate_button_),
                       static_cast<QWidget*>(same_documents_)}) {
        w->setEnabled(!running);
    }
    capture_button_->setEnabled(!running && plan_.capture_here);
    cp_shard_->setEnabled(!running && run_->trace->config.layout.grid.cp > 1);
    schedule_->setEnabled(!running && run_->trace->config.layout.grid.pp > 1);
    if (running) {
        tick_->start();
    } else {
        tick_->stop();
        if (state != State::succeeded) {
            bar_->setRange(0, 1000);
            bar_->setValue(0);
        }
    }
    emit state_changed(state);
}

QString RerunDialog::status_text() const {
    return status_->text();
}

}  // namespace fulcrum::ui
