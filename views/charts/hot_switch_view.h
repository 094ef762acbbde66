// The Hot switch tab (HotSPa, SOSP'24): where a hot-switched step's time went, laid out as
// HotSPa's breakdown (a row per length bucket under its layout, 'others' the switching), and
// the switch-cost matrix, layout i → j. Both draw core/analysis/hot_switch.h's struct, as
// `fulcrum analyze` and the report do; the main window shows the tab only for hot-switched runs.
#pragma once

#include <QAbstractTableModel>
#include <QStringList>
#include <QWidget>
#include <vector>

#include "core/analysis/hot_switch.h"
#include "views/common/opened_run.h"

class QLabel;
class QTableView;

namespace fulcrum::views {

namespace charts {
class MessageStack;
}

class HotSwitchModel : public QAbstractTableModel {
    Q_OBJECT
public:
    // breakdown: bucket, layout, documents, tokens, micro-batches, time, share; a row per
    // bucket, then 'others (switching)' and the rest. matrix: a row and a column per layout,
    // each cell the mean switch from its row's layout to its column's ("12.3 ms / 45.6 MB").
    enum class Table { breakdown, matrix };
    // ValueRole: times in ns, shares as fractions, counts (breakdown); a matrix cell's mean ns.
    // BytesRole: a matrix cell's mean bytes sent by every rank. Invalid where there is none.
    enum Role { ValueRole = Qt::UserRole + 1, BytesRole };

    explicit HotSwitchModel(Table table, QObject* parent = nullptr);

    void set_analysis(const analysis::HotSwitchAnalysis* analysis);  // null empties it

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation,
                        int role = Qt::DisplayRole) const override;

private:
    struct Cell {
        QString text;
        QVariant value, bytes;
        QString tip;
    };
    Table table_;
    QStringList headers_, row_headers_;
    std::vector<std::vector<Cell>> rows_;
};

class HotSwitchView : public QWidget {
    Q_OBJECT
public:
    explicit HotSwitchView(QWidget* parent = nullptr);
    ~HotSwitchView() override;

    void set_run(RunPtr run);
    // True when the run switched layouts per length bucket (the tab is worth showing).
    static bool applies(const RunPtr& run);

    // For tests and the main window.
    QString message() const;  // why nothing is shown; empty when the tables are
    QString summary() const;
    HotSwitchModel* model(HotSwitchModel::Table table) const;
    QTableView* view(HotSwitchModel::Table table) const;

private:
    RunPtr run_;
    charts::MessageStack* stack_;
    QLabel* summary_;
    HotSwitchModel* breakdown_;
    HotSwitchModel* matrix_;
    QTableView* breakdown_view_;
    QTableView* matrix_view_;
};

}  // namespace fulcrum::views
