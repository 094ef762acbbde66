// One set of colours for every view and the screenshot tests: a category or a phase has the
// same colour in the timeline, the bubble chart and the legend.
#pragma once

#include <QColor>

#include "core/trace/model.h"

namespace fulcrum::views::palette {

QColor category(Category category);
QColor phase(Phase phase);  // forward, backward, weight-grad bars
QColor bubble();            // idle time inside a pipeline's window
QColor theory();            // the (p−1)/m line and other "what theory says" marks
QColor predicted();         // predicted work, next to measured time
QColor measured();
QColor highlight();     // the selected event, the highlighted step or micro-batch
QColor critical();      // the outline of passes on a step's critical path
QColor run(int index);  // the index-th run in Compare
QColor faster();        // a difference in favour of the compared run (blue)
QColor slower();        // a difference against it (red)

// The timeline's own surfaces: text, rules, row bands and overlays, so every colour a view paints
// comes from here.
QColor ink();               // text and outlines on light surfaces
QColor faint_ink();         // secondary text: a placeholder
QColor axis_ink();          // the time axis's tick labels
QColor band(bool group);    // a row band's fill: a group of rows, or a row
QColor gutter(int level);   // the label gutter: 0 group, 1 rank, 2 lane
QColor rule();              // lines between rows
QColor gutter_rule();       // the line under a gutter label
QColor frame();             // the gutter's edge and the axis line
QColor surface();           // the axis strip
QColor search_hit();        // the outline of a search hit; with alpha, a measured span
QColor selection_shade();   // a zoom selection being dragged
QColor label_background();  // the box behind a span's duration label
QColor switch_shade();      // a hot switch of layouts, over every row (with alpha)

}  // namespace fulcrum::views::palette
