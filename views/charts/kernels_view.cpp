#include "views/charts/kernels_view.h"

#include <QHeaderView>
#include <QLabel>
#include <QScrollArea>
#include <QSortFilterProxyModel>
#include <QTableView>
#include <QVBoxLayout>

#include "views/charts/chart_common.h"

namespace fulcrum::views {

namespace {

using Table = HtaTableModel::Table;

struct Section {
    Table table;
    const char* title;
};

// In the order a reader asks: what the GPU did, what it waited for, what the network did, and
// what set the step's length.
constexpr Section kSections[] = {
    {Table::kernel_time, "Kernel time by type (per rank; shares of its first to last kernel)"},
    {Table::top_kernels, "Top kernels (by total time over all ranks)"},
    {Table::idle,
     "Idle time by cause (per stream; host wait: launched after the previous kernel ended; kernel "
     "wait: a gap "
     "under 30 µs)"},
    {Table::launches, "Kernel launches (delay: kernel start − end of its launch call)"},
    {Table::communication_totals,
     "Communication by collective, each name's groups together (bandwidths as NCCL-tests defines "
     "them)"},
    {Table::communication, "Communication by collective and group (sort by busbw for the slowest)"},
    {Table::critical_path,
     "Critical path per step (shares of its length; outlined on the timeline and bubbles)"},
};

}  // namespace

KernelsView::KernelsView(QWidget* parent) : QWidget(parent), device_note_(new QLabel) {
    auto* content = new QWidget;
    auto* layout = new QVBoxLayout(content);
    device_note_->setWordWrap(true);
    layout->addWidget(device_note_);
    models_.resize(std::size(kSections) + 1, nullptr);
    views_.resize(std::size(kSections) + 1, nullptr);
    for (const Section& section : kSections) {
        auto* title = new QLabel(tr(section.title));
        QFont bold = title->font();
        bold.setBold(true);
        title->setFont(bold);
        auto* model = new HtaTableModel(section.table, this);
        auto* sorted = new QSortFilterProxyModel(this);
        sorted->setSourceModel(model);
        sorted->setSortRole(HtaTableModel::ValueRole);
        auto* view = new QTableView;
        view->setModel(sorted);
        // Unsorted until a header is clicked: the analysis's own order (largest first).
        view->horizontalHeader()->setSortIndicator(-1, Qt::AscendingOrder);
        view->setSortingEnabled(true);
        view->verticalHeader()->hide();
        view->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
        view->setMinimumHeight(140);
        layout->addWidget(title);
        layout->addWidget(view, 1);
        if (section.table != Table::communication_totals && section.table != Table::communication &&
            section.table != Table::critical_path) {
            device_only_.push_back(title);
            device_only_.push_back(view);
        }
        models_[static_cast<std::size_t>(section.table)] = model;
        views_[static_cast<std::size_t>(section.table)] = view;
    }
    auto* scroll = new QScrollArea;
    scroll->setWidget(content);
    scroll->setWidgetResizable(true);
    stack_ = new charts::MessageStack(scroll, this);
    auto* outer = new QVBoxLayout(this);
    outer->setContentsMargins(0, 0, 0, 0);
    outer->addWidget(stack_);
    set_run(nullptr);
}

KernelsView::~KernelsView() = default;

void KernelsView::set_run(RunPtr run) {
    run_ = std::move(run);
    const analysis::RunAnalysis* analysis = run_ ? run_->analysis.get() : nullptr;
    for (HtaTableModel* model : models_) {
        if (model != nullptr)
            model->set_analysis(analysis);
    }
    if (analysis == nullptr) {
        stack_->show_message(charts::missing_analysis(run_));
        return;
    }
    device_note_->setText(
        analysis->has_device_activity
            ? QString()
            : tr("No device activity (kernels, copies, memsets) in this run: kernel time, top "
                 "kernels, idle causes and launches need a GPU capture or an imported GPU trace."));
    device_note_->setVisible(!analysis->has_device_activity);
    // Empty kernel tables would push what the run does have out of sight.
    for (QWidget* widget : device_only_)
        widget->setVisible(analysis->has_device_activity);
    stack_->show_content();
}

QString KernelsView::message() const {
    return stack_->message();
}
QString KernelsView::device_note() const {
    return device_note_->text();
}

HtaTableModel* KernelsView::model(Table table) const {
    return models_[static_cast<std::size_t>(table)];
}
QTableView* KernelsView::view(Table table) const {
    return views_[static_cast<std::size_t>(table)];
}

}  // namespace fulcrum::views
