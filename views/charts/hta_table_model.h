// HTA's answers as tables for the Kernels tab and Compare (docs/analyses.md §7–10): kernel time by
// type per rank, top kernels, idle time by cause per stream, kernel launches, communication by
// collective, the critical path per step, and the op-level diff of two runs. Each model formats
// one struct of the analysis; nothing is computed here.
#pragma once

#include <QAbstractTableModel>
#include <QStringList>
#include <vector>

#include "core/analysis/run_analysis.h"

namespace fulcrum::views {

class HtaTableModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum class Table {
        kernel_time,
        top_kernels,
        idle,
        launches,
        communication_totals,  // each collective name's groups together (total_collectives)
        communication,
        critical_path,
        diff
    };
    // Qt::DisplayRole is the formatted figure ("—" where there is none); ValueRole the number
    // (times in ns, shares as fractions), for sorting and tests; invalid where there is none.
    enum Role { ValueRole = Qt::UserRole + 1 };

    explicit HtaTableModel(Table table, QObject* parent = nullptr);

    Table table() const { return table_; }
    // The analysis's rows of this table; null empties it. Not for Table::diff.
    void set_analysis(const analysis::RunAnalysis* analysis);
    // The diff's rows (Table::diff only); null empties it.
    void set_diff(const analysis::RunDiff* diff);

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation,
                        int role = Qt::DisplayRole) const override;

    struct Cell {
        QString text;
        QVariant value;
    };

private:
    void fill(const analysis::RunAnalysis& analysis);

    Table table_;
    QStringList headers_;
    std::vector<std::vector<Cell>> rows_;
};

}  // namespace fulcrum::views
