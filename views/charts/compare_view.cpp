#include "views/charts/compare_view.h"

namespace fulcrum::views {

CompareView::CompareView(QWidget* parent) : QWidget(parent) {}
CompareView::~CompareView() = default;
void CompareView::set_runs(const QVector<RunPtr>&) {}

}  // namespace fulcrum::views
