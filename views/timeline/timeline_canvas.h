// The painted part of the timeline: a time axis, row headers drawn from the lane tree model,
// and the events of every visible row planned by plan_row (only what is visible, sub-pixel
// runs folded into one block with a count).
//
// Mouse: wheel zooms about the cursor (Shift+wheel scrolls rows, a horizontal wheel pans);
// left-drag pans (time and rows); a left click selects an event, zooms into a folded block, or
// on a row header collapses/expands it; Shift+left-drag or right-drag selects a time range and
// zooms to it; Ctrl+left-drag measures an interval. Keys: W/S zoom, A/D pan, Home whole run,
// Esc clears the selection and the measurement.
#pragma once

#include <QColor>
#include <QString>
#include <QWidget>
#include <cstdint>
#include <optional>
#include <set>
#include <vector>

#include "views/common/pass_marks.h"
#include "views/timeline/lane_tree_model.h"
#include "views/timeline/paged_timeline.h"
#include "views/timeline/timeline_layout.h"

namespace fulcrum::views::timeline {

// "12.3 µs", "4.56 ms": durations and axis labels.
QString format_duration(std::int64_t ns);

class TimelineCanvas : public QWidget {
    Q_OBJECT
public:
    static constexpr int kAxisHeight = 24;
    static constexpr int kGutterWidth = 200;
    static constexpr int kHeaderHeight = 20;
    static constexpr int kDepthHeight = 18;
    static constexpr double kFoldPx = 3.0;  // events narrower than this fold (Tracy: ~3 px)

    explicit TimelineCanvas(QWidget* parent = nullptr);

    // The trace, layout and model must outlive the canvas or the next set_data.
    void set_data(const analysis::RunTrace* trace, const Layout* layout, LaneTreeModel* model);
    // A run too large to hold: after set_data with the skeleton's trace and layout
    // (PagedTimeline::skeleton_layout), rows are drawn from their summaries until the detail
    // of the window arrives, then event by event (paged_timeline.h). Null: not paged. The
    // source must outlive the canvas or the next set_data.
    void set_paged(PagedTimeline* paged);
    PagedTimeline* paged() const { return paged_; }
    // What is drawn now: the run's names and roles (a paged run's skeleton), and the layout
    // whose rows hold the events (a paged run's latest detail: its rows index the same lanes).
    const analysis::RunTrace* trace() const { return trace_; }
    const Layout* layout() const { return layout_; }
    // Whether `row` is drawn event by event in the current window (always, unless paged).
    bool row_has_detail(std::uint32_t row) const;

    // The visible time window; kept at least 10 ns wide.
    std::int64_t window_start() const { return window_start_; }
    std::int64_t window_end() const { return window_end_; }
    void set_window(std::int64_t start_ns, std::int64_t end_ns);
    void show_all();
    void zoom_about(double x, double factor);  // factor < 1 zooms in

    // Coordinate mapping, in widget pixels.
    double x_of(std::int64_t ns) const;
    std::int64_t time_at(double x) const;
    double time_area_width() const { return std::max(1, width() - kGutterWidth); }
    // The box of an event where it is drawn now (it may lie outside the widget when scrolled
    // or zoomed away); empty when its row is collapsed.
    QRectF event_rect(EventRef ref) const;
    // The event under a point (as drawn: a folded block is not an event); nullopt when none.
    std::optional<EventRef> event_at_point(QPointF point) const;

    int scroll() const { return scroll_; }
    void set_scroll(int y);
    int content_height() const { return content_height_; }
    void scroll_to_row(std::uint32_t row);

    void select(std::optional<EventRef> ref);
    std::optional<EventRef> selected() const { return selected_; }
    void set_highlight(int step, int microbatch);
    void set_measure(std::int64_t start_ns, std::int64_t end_ns);  // end < start clears
    void set_search_hit(std::optional<EventRef> ref);
    std::optional<EventRef> search_hit() const { return search_hit_; }
    // Passes on a step's critical path, outlined in palette::critical() (pass_marks.h).
    void set_critical_passes(std::set<PassKey> keys);
    const std::set<PassKey>& critical_passes() const { return critical_; }
    // Hot switches of layouts (HotSPa): a band shaded over every row for each, with `text` as
    // its tooltip and in the status line. Sorted by start.
    struct SwitchMark {
        std::int64_t start_ns = 0, end_ns = 0;
        QString text;
    };
    void set_switch_marks(std::vector<SwitchMark> marks);
    const std::vector<SwitchMark>& switch_marks() const { return switch_marks_; }
    // The text of the switch under x (widget pixels; a mark is at least 3 px wide); empty when
    // none.
    QString switch_text_at(double x) const;
    // What the last paint shaded.
    std::int64_t painted_switches() const { return painted_switches_; }
    // How an event is filled: a pass by its kind (F, B, W: palette::phase), the rest by
    // category.
    QColor event_colour(const Event& event) const;
    // What the last paint outlined as critical.
    std::int64_t painted_critical() const { return painted_critical_; }

    QColor background() const { return QColor(Qt::white); }
    // A folded block takes its first event's category colour, washed towards grey: the
    // reader still sees "mostly attention here" zoomed out, and that it is a block, not a box.
    static QColor fold_colour(const Event& first);
    // What the last paint drew: boxes (single events) and folded blocks.
    std::int64_t painted_boxes() const { return painted_boxes_; }
    std::int64_t painted_folds() const { return painted_folds_; }
    // Summary bins the last paint drew for rows whose detail was not there (paged runs).
    std::int64_t painted_bins() const { return painted_bins_; }

signals:
    void window_changed(std::int64_t start_ns, std::int64_t end_ns);
    void selection_changed();
    void scroll_range_changed(int maximum, int page);
    void scroll_changed(int value);
    void status_message(const QString& text);
    // A paged run's detail was replaced (event references from before no longer hold).
    void detail_changed();

protected:
    bool event(QEvent* event) override;
    void paintEvent(QPaintEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;
    void mousePressEvent(QMouseEvent* event) override;
    void mouseMoveEvent(QMouseEvent* event) override;
    void mouseReleaseEvent(QMouseEvent* event) override;
    void wheelEvent(QWheelEvent* event) override;
    void keyPressEvent(QKeyEvent* event) override;

private:
    // One horizontal band of the canvas: a group or rank header, or a lane's rows.
    struct Band {
        QPersistentModelIndex node;
        LaneTreeModel::NodeKind kind = LaneTreeModel::NodeKind::lane;
        int depth_in_tree = 0;
        int y = 0;  // content coordinates (before scrolling, below the axis)
        int height = 0;
        int lane_row = -1;                        // lane bands
        std::vector<std::uint32_t> summary_rows;  // collapsed rank headers: its lanes' rows
        bool expanded = true;
    };
    void rebuild_bands();
    const Band* band_at(double y) const;
    int band_of_row(std::uint32_t row) const;
    double screen_y(int content_y) const { return kAxisHeight + content_y - scroll_; }
    void paint_lane(QPainter& painter, const Band& band, const QRect& clip);
    void paint_summary(QPainter& painter, const Band& band);
    void paint_lane_bins(QPainter& painter, const Band& band);
    void paint_header_bins(QPainter& painter, std::uint32_t row, int y);
    void adopt_detail();
    std::optional<EventRef> find_in_detail(std::uint32_t row, const Event& event) const;
    void paint_highlight(QPainter& painter, const Band& band, bool outline);
    void paint_flows(QPainter& painter);
    void paint_switches(QPainter& painter);
    void paint_axis(QPainter& painter);
    const QString& name_text(StringId id, int* width);
    std::optional<PlanItem> item_at_point(QPointF point, std::uint32_t* row) const;
    void click(QPointF point);
    void emit_hover(QPointF point);

    const analysis::RunTrace* trace_ = nullptr;
    const Layout* layout_ = nullptr;
    PagedTimeline* paged_ = nullptr;
    std::shared_ptr<const PagedDetail> detail_;               // what trace_ and layout_ point into
    std::optional<Event> selected_event_, search_hit_event_;  // to find them in a new detail
    std::vector<std::uint32_t> wanted_rows_;  // reused: rows a paint asked detail for
    LaneTreeModel* model_ = nullptr;
    std::vector<Band> bands_;
    std::vector<int> band_of_row_;  // layout row → band index, -1 when hidden
    int content_height_ = 0;
    int scroll_ = 0;
    std::int64_t window_start_ = 0, window_end_ = 1'000'000;

    std::optional<EventRef> selected_;
    std::optional<EventRef> search_hit_;
    std::set<PassKey> critical_;
    std::vector<SwitchMark> switch_marks_;
    int highlight_step_ = -1, highlight_microbatch_ = -1;
    std::int64_t measure_start_ = 0, measure_end_ = -1;

    enum class Drag { none, pending, pan, zoom_select, measure };
    Drag drag_ = Drag::none;
    QPointF press_pos_, last_pos_;
    std::int64_t drag_start_ns_ = 0;

    std::vector<QString> names_;    // by StringId, filled on first use
    std::vector<int> name_widths_;  // their widths in the canvas font, -1 until measured
    QString last_status_;
    std::vector<PlanItem> plan_;  // reused across rows
    std::int64_t painted_boxes_ = 0, painted_folds_ = 0, painted_critical_ = 0;
    std::int64_t painted_switches_ = 0;
    std::int64_t painted_bins_ = 0;
};

}  // namespace fulcrum::views::timeline
