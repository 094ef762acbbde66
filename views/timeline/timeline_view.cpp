#include "views/timeline/timeline_view.h"

namespace fulcrum::views {

TimelineView::TimelineView(QWidget* parent) : QWidget(parent) {}
TimelineView::~TimelineView() = default;
void TimelineView::set_run(RunPtr) {}
void TimelineView::show_place(const Place&) {}
void TimelineView::highlight_step(int) {}
void TimelineView::highlight_microbatch(int) {}
void TimelineView::zoom_to(std::int64_t, std::int64_t) {}

}  // namespace fulcrum::views
