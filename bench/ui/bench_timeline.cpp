// bench_timeline: the timeline on a 10M-event run (issue: opens in < 5 s, a frame in < 16 ms).
//
// The run is bench_analyze's synthetic 4D run (same options, same cached file). Two
// measurements, each against a baseline taken in the same run:
//  - open: TraceReader::open + load_run_trace + build_layout, against one plain SQL scan of
//    every event row (the least any reader has to do);
//  - frame: the canvas painted into a 1920×1080 image at three zoom levels (whole run, one
//    step, one millisecond), median and p90 over --frames frames, against a naive painter
//    that draws every event of the visible rows in the window without folding (hotspot's
//    weak spot), capped to a few frames when it is slow.
#include <sqlite3.h>
#include <CLI/CLI.hpp>

#include <QApplication>
#include <QImage>
#include <QPainter>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "bench/common/bench_support.h"
#include "core/store/merge.h"
#include "core/store/trace_reader.h"
#include "core/util/text_table.h"
#include "views/common/palette.h"
#include "views/timeline/lane_tree_model.h"
#include "views/timeline/timeline_canvas.h"
#include "views/timeline/timeline_layout.h"

using namespace fulcrum;
using namespace fulcrum::views::timeline;
using bench::cell;
using bench::Clock;
using bench::seconds_since;

namespace {

// Every event of every row that fits in the image, drawn if it overlaps the window.
void paint_naive(QImage& image, const Layout& layout, std::int64_t start_ns, std::int64_t end_ns) {
    QPainter painter(&image);
    painter.fillRect(image.rect(), Qt::white);
    const int gutter = TimelineCanvas::kGutterWidth;
    const double scale = (image.width() - gutter) / static_cast<double>(end_ns - start_ns);
    int y = TimelineCanvas::kAxisHeight;
    for (const LaneRow& row : layout.rows) {
        if (y >= image.height()) {
            break;
        }
        for (std::uint32_t i = 0; i < row.lane->events.size(); ++i) {
            const Event& event = row.lane->events[i];
            if (event.end_ns < start_ns || event.start_ns > end_ns) {
                continue;
            }
            const double x0 = gutter + (event.start_ns - start_ns) * scale;
            const double x1 = gutter + (event.end_ns - start_ns) * scale;
            painter.fillRect(QRectF(x0, y + row.depth[i] * TimelineCanvas::kDepthHeight,
                                    std::max(1.0, x1 - x0), TimelineCanvas::kDepthHeight - 1),
                             views::palette::category(event.category));
        }
        y += std::max(1, row.depths()) * TimelineCanvas::kDepthHeight + 4;
    }
}

struct Timing {
    double median_ms = 0, p90_ms = 0;
    int frames = 0;
};

template <typename Paint>
Timing time_frames(int frames, double cap_seconds, Paint paint) {
    std::vector<double> ms;
    const auto begin = Clock::now();
    for (int i = 0; i < frames; ++i) {
        const auto start = Clock::now();
        paint();
        ms.push_back(seconds_since(start) * 1e3);
        if (seconds_since(begin) > cap_seconds) {
            break;
        }
    }
    std::sort(ms.begin(), ms.end());
    Timing t;
    t.frames = static_cast<int>(ms.size());
    t.median_ms = ms[ms.size() / 2];
    t.p90_ms = ms[std::min(ms.size() - 1, static_cast<std::size_t>(ms.size() * 0.9))];
    return t;
}

}  // namespace

int main(int argc, char** argv) {
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) {
        qputenv("QT_QPA_PLATFORM", "offscreen");
    }
    QApplication qt(argc, argv);
    CLI::App app{"bench_timeline: open a 10M-event run into the timeline and paint frames"};
    std::string run_path =
        (std::filesystem::temp_directory_path() / "fulcrum-bench-analyze.fulcrum").string();
    std::int64_t target = 10'000'000;
    int frames = 30;
    int repeats = 2;
    app.add_option("--run", run_path, "The run; made (and kept) when it does not exist")
        ->capture_default_str();
    app.add_option("--events", target, "Events of the run to make")->capture_default_str();
    app.add_option("--frames", frames, "Frames per zoom level")->capture_default_str();
    app.add_option("--repeats", repeats, "Opens to take the best of")->capture_default_str();
    CLI11_PARSE(app, argc, argv);

    if (bench::count_events(run_path) < target) {
        std::filesystem::remove(run_path);
        if (auto status = bench::make_synthetic_run(run_path, target); !status) {
            std::fprintf(stderr, "bench_timeline: %s\n", status.error().message.c_str());
            return 2;
        }
    }

    double best_scan = 1e30, best_read = 1e30, best_layout = 1e30, best_open = 1e30;
    std::unique_ptr<analysis::RunTrace> trace;
    std::unique_ptr<Layout> layout;
    for (int i = 0; i < repeats; ++i) {
        best_scan = std::min(best_scan, bench::plain_scan_seconds(run_path));
        layout.reset();
        trace.reset();
        const auto start = Clock::now();
        auto reader = store::TraceReader::open(run_path);
        if (!reader) {
            std::fprintf(stderr, "bench_timeline: %s\n", reader.error().message.c_str());
            return 2;
        }
        auto loaded = analysis::load_run_trace(*reader);
        if (!loaded) {
            std::fprintf(stderr, "bench_timeline: %s\n", loaded.error().message.c_str());
            return 2;
        }
        trace = std::make_unique<analysis::RunTrace>(std::move(*loaded));
        const double read = seconds_since(start);
        const auto layout_start = Clock::now();
        layout = std::make_unique<Layout>(build_layout(*trace));
        best_layout = std::min(best_layout, seconds_since(layout_start));
        best_read = std::min(best_read, read);
        best_open = std::min(best_open, seconds_since(start));
    }

    LaneTreeModel model;
    TimelineCanvas canvas;
    canvas.resize(1920, 1080);
    canvas.set_data(trace.get(), layout.get(), &model);
    model.set_run(trace.get(), layout.get());
    QImage image(1920, 1080, QImage::Format_RGB32);

    // Zoom levels: the whole run, rank 0's step 1 (or 0), one millisecond in the middle.
    struct Zoom {
        std::string name;
        std::int64_t start, end;
    };
    std::vector<Zoom> zooms;
    zooms.push_back({"whole run", layout->start_ns, layout->end_ns});
    int step = 0;
    for (const WorkSpan& span : layout->spans[0]) {
        step = std::max(step, std::min(span.step, 1));
    }
    std::int64_t step_start = layout->end_ns, step_end = layout->start_ns;
    for (const WorkSpan& span : layout->spans[0]) {
        if (span.step == step) {
            step_start = std::min(step_start, span.start_ns);
            step_end = std::max(step_end, span.end_ns);
        }
    }
    zooms.push_back({"one step", step_start, step_end});
    const std::int64_t middle = (layout->start_ns + layout->end_ns) / 2;
    zooms.push_back({"1 ms", middle - 500'000, middle + 500'000});

    using Align = TextTable::Align;
    TextTable table({"measurement", "median", "p90", "vs baseline", "target"},
                    {Align::left, Align::right, Align::right, Align::right, Align::left});
    table.add_row(
        {"baseline: one SQL scan of every event row", cell(best_scan, "%.2f s"), "", "1.00x", ""});
    table.add_row({"  read: TraceReader::open + load_run_trace", cell(best_read, "%.2f s"), "",
                   cell(best_read / best_scan, "%.2fx"), ""});
    table.add_row({"  layout: build_layout (depths, LOD index, spans)", cell(best_layout, "%.2f s"),
                   "", cell(best_layout / best_scan, "%.2fx"), ""});
    table.add_row({"open: run ready to paint", cell(best_open, "%.2f s"), "",
                   cell(best_open / best_scan, "%.2fx"), "< 5 s"});
    std::int64_t visible_boxes = 0, visible_folds = 0;
    for (const Zoom& zoom : zooms) {
        canvas.set_window(zoom.start, zoom.end);
        const Timing naive =
            time_frames(5, 2.0, [&] { paint_naive(image, *layout, zoom.start, zoom.end); });
        const Timing lod = time_frames(frames, 30.0, [&] { canvas.render(&image); });
        visible_boxes = canvas.painted_boxes();
        visible_folds = canvas.painted_folds();
        table.add_row({"baseline: naive paint, " + zoom.name + " (" + std::to_string(naive.frames) +
                           " frames)",
                       cell(naive.median_ms, "%.1f ms"), cell(naive.p90_ms, "%.1f ms"), "1.00x",
                       ""});
        table.add_row({"frame: timeline, " + zoom.name + " (" + std::to_string(visible_boxes) +
                           " boxes, " + std::to_string(visible_folds) + " folds)",
                       cell(lod.median_ms, "%.1f ms"), cell(lod.p90_ms, "%.1f ms"),
                       cell(lod.median_ms / naive.median_ms, "%.3fx"), "< 16 ms"});
    }
    std::printf("\n%lld events on %zu rows, 1920x1080 frames\n%s",
                static_cast<long long>(layout->events), layout->rows.size(),
                table.render().c_str());
    return 0;
}
