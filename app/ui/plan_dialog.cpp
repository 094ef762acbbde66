#include "app/ui/plan_dialog.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QTimer>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include "app/launch/command_line.h"
#include "core/sim/hardware.h"

namespace fulcrum::ui {

namespace {

QSpinBox* spin(int low, int high, int value) {
    auto* box = new QSpinBox;
    box->setRange(low, high);
    box->setValue(value);
    return box;
}

// The worker: calibrates on the run when asked (as `fulcrum plan --calibrate` does), then plans.
void search(plan::PlanRequest request, views::RunPtr calibrate_on, const std::atomic<bool>* cancel,
            std::atomic<double>* progress, std::shared_ptr<views::PlanData> out, QString* error,
            bool* cancelled) {
    if (calibrate_on && calibrate_on->trace && calibrate_on->analysis) {
        // The cost model the run's analysis fitted, held or paged alike.
        auto calibration = sim::calibrate(*calibrate_on->trace, *calibrate_on->analysis);
        if (!calibration) {
            *error = QString::fromStdString(calibration.error().message);
            return;
        }
        request.calibrations = {std::move(*calibration)};
        request.calibration_runs = {calibrate_on->path.toStdString()};
    }
    plan::PlanProgress callbacks;
    callbacks.progress = [progress](double fraction) { progress->store(fraction); };
    callbacks.cancel = cancel;
    auto result = plan::plan(request, callbacks);
    if (!result) {
        *cancelled = result.error().code == ErrorCode::cancelled;
        *error = QString::fromStdString(result.error().message);
        return;
    }
    launch::write_commands(request, *result);
    out->request = std::move(request);
    out->result = std::move(*result);
}

}  // namespace

PlanDialog::PlanDialog(views::RunPtr run, QWidget* parent)
    : QDialog(parent),
      run_(std::move(run)),
      watcher_(new QFutureWatcher<void>(this)),
      tick_(new QTimer(this)),
      layers_(spin(1, 1000, 32)),
      hidden_(spin(1, 1 << 20, 4096)),
      heads_(spin(1, 4096, 32)),
      context_(spin(1, 1 << 24, 8192)),
      vocab_(spin(1, 1 << 24, 32000)),
      lengths_(new QLineEdit),
      worlds_(new QLineEdit(QStringLiteral("8"))),
      gpus_per_node_(spin(1, 64, 8)),
      gpu_memory_(new QDoubleSpinBox),
      hardware_(new QComboBox),
      global_batch_(spin(1, 1 << 24, 1024)),
      top_k_(spin(1, 1000, 10)),
      calibrate_(new QCheckBox(tr("Calibrate on the open run (its measured costs)"))),
      bar_(new QProgressBar),
      status_(new QLabel),
      start_button_(new QPushButton(tr("Plan"))),
      cancel_button_(new QPushButton(tr("Cancel"))) {
    setWindowTitle(tr("Plan layouts"));
    gpu_memory_->setRange(1, 4096);
    gpu_memory_->setValue(80);
    gpu_memory_->setSuffix(tr(" GiB"));
    hardware_->addItems({QStringLiteral("h100"), QStringLiteral("a100")});
    lengths_->setPlaceholderText(tr("long-tail:context=…,median=… (default)"));
    worlds_->setToolTip(tr("GPUs: one count, or a list such as 256,1024"));
    const analysis::RunAnalysis* analysis = run_ ? run_->analysis.get() : nullptr;
    if (analysis != nullptr && analysis->config.has_model()) {
        const RunConfig& config = analysis->config;
        for (auto [box, value] : {std::pair{layers_, config.model.layers},
                                  {hidden_, config.model.hidden},
                                  {heads_, config.model.heads},
                                  {context_, config.model.context},
                                  {vocab_, config.model.vocab}}) {
            if (value > 0)
                box->setValue(value);
        }
        lengths_->setText(QString::fromStdString(config.lengths));
        worlds_->setText(QString::number(config.layout.grid.world()));
    }
    const bool calibratable =
        run_ && run_->trace && analysis != nullptr && !analysis->config.simulated;
    calibrate_->setEnabled(calibratable);
    calibrate_->setToolTip(calibratable ? tr("As fulcrum plan --calibrate RUN")
                                        : tr("Needs an open captured run (not a simulated one)"));

    auto* form = new QFormLayout;
    form->addRow(tr("Layers"), layers_);
    form->addRow(tr("Hidden size"), hidden_);
    form->addRow(tr("Attention heads"), heads_);
    form->addRow(tr("Context (tokens)"), context_);
    form->addRow(tr("Vocabulary"), vocab_);
    form->addRow(tr("Document lengths"), lengths_);
    form->addRow(tr("World sizes (GPUs)"), worlds_);
    form->addRow(tr("GPUs per node"), gpus_per_node_);
    form->addRow(tr("GPU memory"), gpu_memory_);
    form->addRow(tr("Hardware"), hardware_);
    form->addRow(tr("Global batch (sequences)"), global_batch_);
    form->addRow(tr("Top k"), top_k_);
    form->addRow(QString(), calibrate_);
    auto* buttons = new QDialogButtonBox;
    buttons->addButton(start_button_, QDialogButtonBox::ActionRole);
    buttons->addButton(cancel_button_, QDialogButtonBox::ActionRole);
    buttons->addButton(QDialogButtonBox::Close);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    connect(start_button_, &QPushButton::clicked, this, &PlanDialog::start);
    connect(cancel_button_, &QPushButton::clicked, this, &PlanDialog::cancel);
    connect(watcher_, &QFutureWatcher<void>::finished, this, &PlanDialog::finished);
    connect(tick_, &QTimer::timeout, this,
            [this] { bar_->setValue(static_cast<int>(1000 * progress_.load())); });
    bar_->setRange(0, 1000);
    status_->setWordWrap(true);
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(form);
    layout->addWidget(bar_);
    layout->addWidget(status_);
    layout->addWidget(buttons);
    set_running(false);
}

PlanDialog::~PlanDialog() {
    cancel_.store(true);
    watcher_->waitForFinished();
}

Result<plan::PlanRequest> PlanDialog::request() const {
    plan::PlanRequest request;
    request.model = {.layers = layers_->value(),
                     .hidden = hidden_->value(),
                     .heads = heads_->value(),
                     .context = context_->value(),
                     .vocab = vocab_->value()};
    for (const QString& word : worlds_->text().split(',', Qt::SkipEmptyParts)) {
        bool ok = false;
        const int world = word.trimmed().toInt(&ok);
        if (!ok || world <= 0)
            return Error{ErrorCode::invalid_input,
                         "World sizes: '" + word.trimmed().toStdString() +
                             "' is not a number of GPUs (e.g. 8, or 256,1024)"};
        request.world_sizes.push_back(world);
    }
    if (request.world_sizes.empty())
        return Error{ErrorCode::invalid_input, "World sizes: give at least one number of GPUs"};
    request.gpus_per_node = gpus_per_node_->value();
    request.gpu_memory_gib = gpu_memory_->value();
    request.global_batch = global_batch_->value();
    request.top_k = top_k_->value();
    request.lengths = lengths_->text().trimmed().toStdString();
    if (request.lengths.empty()) {
        // fulcrum plan's default (app/cli/cmd_plan.cpp): a long tail with a median of 1/8 of the
        // context, at most 1900 tokens.
        const int context = request.model.context;
        request.lengths = "long-tail:context=" + std::to_string(context) +
                          ",median=" + std::to_string(std::max(1, std::min(1900, context / 8)));
    }
    auto preset = sim::hardware_preset(hardware_->currentText().toStdString());
    if (!preset)
        return preset.error();
    request.hardware = *preset;
    request.hardware.gpus_per_node = request.gpus_per_node;
    if (auto status = plan::validate(request); !status)
        return status.error();
    return request;
}

void PlanDialog::start() {
    if (running())
        return;
    auto request = this->request();
    if (!request) {
        status_->setText(QString::fromStdString(request.error().message));
        return;
    }
    cancel_.store(false);
    progress_.store(0);
    outcome_ = std::make_shared<Outcome>();
    outcome_->plan = std::make_shared<views::PlanData>();
    auto outcome = outcome_;
    const views::RunPtr calibrate_on = calibrate_->isChecked() ? run_ : nullptr;
    watcher_->setFuture(QtConcurrent::run([this, outcome, calibrate_on, r = std::move(*request)] {
        search(r, calibrate_on, &cancel_, &progress_, outcome->plan, &outcome->error,
               &outcome->cancelled);
    }));
    status_->setText(calibrate_on ? tr("Calibrating on %1, then planning…").arg(run_->title)
                                  : tr("Planning…"));
    set_running(true);
}

void PlanDialog::cancel() {
    if (!running())
        return;
    cancel_.store(true);
    status_->setText(tr("Cancelling…"));
}

// Until finished() has run, not merely the worker: the plan has been handed over by then.
bool PlanDialog::running() const {
    return running_;
}

QString PlanDialog::status_text() const {
    return status_->text();
}

void PlanDialog::finished() {
    set_running(false);
    const auto outcome = std::move(outcome_);
    if (!outcome)
        return;
    if (outcome->cancelled) {
        status_->setText(tr("Cancelled."));
        return;
    }
    if (!outcome->error.isEmpty()) {
        status_->setText(tr("Planning failed: %1").arg(outcome->error));
        return;
    }
    bar_->setValue(bar_->maximum());
    const auto& result = outcome->plan->result;
    status_->setText(tr("%1 candidates in %2 s; %3 ranked. See the Plan tab.")
                         .arg(result.counts.enumerated)
                         .arg(result.elapsed_s, 0, 'f', 1)
                         .arg(result.ranked.size()));
    emit plan_ready(outcome->plan);
}

void PlanDialog::set_running(bool on) {
    running_ = on;
    start_button_->setEnabled(!on);
    cancel_button_->setEnabled(on);
    bar_->setVisible(on || bar_->value() > 0);
    if (on)
        tick_->start(100);
    else
        tick_->stop();
}

}  // namespace fulcrum::ui
