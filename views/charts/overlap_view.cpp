#include "views/charts/overlap_view.h"

namespace fulcrum::views {

OverlapView::OverlapView(QWidget* parent) : QWidget(parent) {}
OverlapView::~OverlapView() = default;
void OverlapView::set_run(RunPtr) {}

}  // namespace fulcrum::views
