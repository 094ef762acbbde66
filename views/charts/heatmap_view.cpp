#include "views/charts/heatmap_view.h"

namespace fulcrum::views {

HeatmapView::HeatmapView(QWidget* parent) : QWidget(parent) {}
HeatmapView::~HeatmapView() = default;
void HeatmapView::set_run(RunPtr) {}

}  // namespace fulcrum::views
