// One set of colours for every view and the screenshot tests: a category or a phase has the
// same colour in the timeline, the bubble chart and the legend.
#pragma once

#include <QColor>

#include "core/trace/model.h"

namespace fulcrum::views::palette {

QColor category(Category category);
QColor phase(Phase phase);     // forward, backward, weight-grad bars
QColor bubble();               // idle time inside a pipeline's window
QColor theory();               // the (p−1)/m line and other "what theory says" marks
QColor predicted();            // predicted work, next to measured time
QColor measured();
QColor highlight();            // the selected event, the highlighted step or micro-batch
QColor critical();             // the outline of passes on a step's critical path
QColor run(int index);         // the index-th run in Compare

}  // namespace fulcrum::views::palette
