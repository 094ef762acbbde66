// Compare: two or more runs side by side — step-time distributions, bubble, imbalance,
// heatmap differences, predicted against measured.
// (Stub until the charts land; the public interface is fixed.)
#pragma once

#include <QVector>
#include <QWidget>

#include "views/common/opened_run.h"

namespace fulcrum::views {

class CompareView : public QWidget {
    Q_OBJECT
public:
    explicit CompareView(QWidget* parent = nullptr);
    ~CompareView() override;

    // The first run is the reference that differences are taken against.
    void set_runs(const QVector<RunPtr>& runs);
};

}  // namespace fulcrum::views
