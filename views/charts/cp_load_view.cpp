#include "views/charts/cp_load_view.h"

namespace fulcrum::views {

CpLoadView::CpLoadView(QWidget* parent) : QWidget(parent) {}
CpLoadView::~CpLoadView() = default;
void CpLoadView::set_run(RunPtr) {}

}  // namespace fulcrum::views
