// The bubble of each stage of one pipeline in one step, as a table: measured fraction against
// theory, and the split into warm-up/cool-down, unequal micro-batches and other
// (core/analysis/bubbles.h).
#pragma once

#include <QAbstractTableModel>
#include <QString>
#include <optional>
#include <vector>

#include "core/analysis/bubbles.h"

namespace fulcrum::views {

class BubbleStageModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column {
        stage,
        rank,
        measured_fraction,
        theory_fraction,
        bubble,
        warmup_cooldown,
        unequal_microbatches,
        other,
        wait_on_previous,
        wait_on_next,
        column_count
    };
    // Qt::DisplayRole is the formatted figure ("—" where there is none); ValueRole the number
    // (fractions as fractions, times in ns), for sorting and tests, invalid where there is none.
    enum Role { ValueRole = Qt::UserRole + 1 };

    explicit BubbleStageModel(QObject* parent = nullptr);

    // `stages` of one pipeline and step, by stage; `theory` is the pipeline's theoretical
    // bubble, `formula` the schedule's (analysis::theory_formula), named in its column's header.
    void set_stages(std::vector<analysis::StageBubble> stages, std::optional<double> theory,
                    QString formula = QStringLiteral("(p−1)/m"));

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation,
                        int role = Qt::DisplayRole) const override;

private:
    std::vector<analysis::StageBubble> stages_;
    std::optional<double> theory_;
    QString formula_ = QStringLiteral("(p−1)/m");
};

}  // namespace fulcrum::views
