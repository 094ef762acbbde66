// The timeline: every rank and lane of a run, grouped by DP / PP / CP / TP coordinates.
//
// A toolbar (grouping, search, highlighted step and micro-batch), the painted canvas with its
// vertical scroll bar, and a details panel for the selected event. The layout (depths and the
// level-of-detail index, timeline_layout.h) is built once per run in set_run.
#pragma once

#include <QWidget>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "views/common/opened_run.h"
#include "views/common/place.h"
#include "views/timeline/lane_tree_model.h"
#include "views/timeline/paged_timeline.h"
#include "views/timeline/timeline_canvas.h"
#include "views/timeline/timeline_layout.h"

class QComboBox;
class QLabel;
class QLineEdit;
class QScrollBar;
class QSpinBox;
class QTextBrowser;

namespace fulcrum::views {

class TimelineView : public QWidget {
    Q_OBJECT
public:
    explicit TimelineView(QWidget* parent = nullptr);
    ~TimelineView() override;

    void set_run(RunPtr run);
    // Zooms to the place (a rank's step or micro-batch) and highlights it on every rank.
    void show_place(const Place& place);
    void highlight_step(int step);              // -1 clears
    void highlight_microbatch(int microbatch);  // -1 clears
    void zoom_to(std::int64_t start_ns, std::int64_t end_ns);

    // For tests, the bench and the main window's menus.
    timeline::TimelineCanvas* canvas() const { return canvas_; }
    timeline::LaneTreeModel* lane_model() const { return model_; }
    // What the canvas draws now: for a paged run, the latest detail's layout.
    const timeline::Layout* layout() const { return canvas_->layout(); }
    // Null unless the run is paged (OpenedRun::paged).
    timeline::PagedTimeline* paged() const { return paged_.get(); }
    QTextBrowser* details() const { return details_; }
    void set_grouping(timeline::Grouping grouping);
    void select_event(std::optional<timeline::EventRef> ref);
    // Finds events whose name contains `text` (case-insensitive) and shows the first; returns
    // how many there are.
    int search(const QString& text);
    void next_hit();
    void previous_hit();
    const std::vector<timeline::EventRef>& hits() const { return hits_; }

signals:
    // The hovered event, a measured interval: for the main window's status bar.
    void status_message(const QString& text);

private:
    void show_details();
    void show_hit(int index);

    RunPtr run_;
    std::unique_ptr<timeline::Layout> layout_;
    std::unique_ptr<timeline::PagedTimeline> paged_;
    timeline::LaneTreeModel* model_ = nullptr;
    timeline::TimelineCanvas* canvas_ = nullptr;
    QScrollBar* scroll_ = nullptr;
    QTextBrowser* details_ = nullptr;
    QComboBox* grouping_ = nullptr;
    QLineEdit* search_ = nullptr;
    QLabel* hit_label_ = nullptr;
    QSpinBox* step_ = nullptr;
    QSpinBox* microbatch_ = nullptr;
    std::vector<timeline::EventRef> hits_;
    int hit_ = -1;
};

}  // namespace fulcrum::views
