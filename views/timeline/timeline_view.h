// The timeline: every rank and lane of a run, grouped by DP / PP / CP / TP coordinates.
// (Stub until the timeline lands; the public interface is fixed.)
#pragma once

#include <QWidget>
#include <cstdint>

#include "views/common/opened_run.h"
#include "views/common/place.h"

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

signals:
    // The hovered event, a measured interval: for the main window's status bar.
    void status_message(const QString& text);
};

}  // namespace fulcrum::views
