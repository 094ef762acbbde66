// The Kernels tab: HTA's answers for one run (docs/analyses.md §7–10) as sortable tables —
// kernel time by type per rank, top kernels, idle time by cause per stream, kernel launches,
// communication by collective and the critical path per step. A run without device activity
// says so above the tables that need it.
#pragma once

#include <QWidget>

#include "views/charts/hta_table_model.h"
#include "views/common/opened_run.h"

class QLabel;
class QTableView;

namespace fulcrum::views {

namespace charts {
class MessageStack;
}

class KernelsView : public QWidget {
    Q_OBJECT
public:
    explicit KernelsView(QWidget* parent = nullptr);
    ~KernelsView() override;

    void set_run(RunPtr run);

    // For tests and the main window.
    QString message() const;      // why nothing is shown; empty when the tables are
    QString device_note() const;  // why the kernel tables are empty; empty when they are not
    HtaTableModel* model(HtaTableModel::Table table) const;
    QTableView* view(HtaTableModel::Table table) const;

private:
    RunPtr run_;
    charts::MessageStack* stack_;
    QLabel* device_note_;
    std::vector<HtaTableModel*> models_;  // by Table
    std::vector<QTableView*> views_;
    std::vector<QWidget*> device_only_;  // titles and tables that need device activity
};

}  // namespace fulcrum::views
