// Heatmaps: rank × micro-batch and rank × step, with a colour scale.
// (Stub until the charts land; the public interface is fixed.)
#pragma once

#include <QWidget>

#include "views/common/opened_run.h"
#include "views/common/place.h"

namespace fulcrum::views {

class HeatmapView : public QWidget {
    Q_OBJECT
public:
    explicit HeatmapView(QWidget* parent = nullptr);
    ~HeatmapView() override;

    void set_run(RunPtr run);
signals:
    // A cell was clicked: the timeline jumps there.
    void place_activated(const fulcrum::views::Place& place);
};

}  // namespace fulcrum::views
