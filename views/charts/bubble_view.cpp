#include "views/charts/bubble_view.h"

namespace fulcrum::views {

BubbleView::BubbleView(QWidget* parent) : QWidget(parent) {}
BubbleView::~BubbleView() = default;
void BubbleView::set_run(RunPtr) {}

}  // namespace fulcrum::views
