// bench_timeline_scale: the timeline of a 1024-rank, 100 M-event run (issue 18: open to first
// frame ≤ 5 s, resident memory ≤ 3 GB, frames ≤ 16 ms at every zoom, on this 2-core machine).
//
// The run is make_scale_run's (bench/common/scale_run.h: a 4D job of dp 16 × tp 4 × pp 8 × cp 2
// in event blocks), given lane summaries once (store::build_lane_summaries, timed); both kept.
// Measured in this process through the path the GUI takes: views::open_run (paged, since the run is
// over paged_event_threshold()), TimelineView::set_run and the first frame painted at 1920×1080.
// Then at three zooms (whole run, one step, 1 ms): frames drawn from the summaries while the detail
// is read (the event loop is not run, so none is adopted), the time until the window's detail
// arrives, and frames with it. Peak RSS is this process's: the run and the baseline are made in
// child processes.
//
// Baseline, in a child process on the same machine: the in-memory path (load_run_trace +
// build_layout + first frame, what bench_timeline measures) on a --baseline-events run of the
// same shape, and its frames at the same zooms.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <QApplication>
#include <QImage>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "bench/common/bench_support.h"
#include "bench/common/scale_run.h"
#include "core/store/lane_summary.h"
#include "core/store/lane_summary_file.h"
#include "core/store/trace_reader.h"
#include "core/util/text_table.h"
#include "views/common/opened_run.h"
#include "views/timeline/lane_tree_model.h"
#include "views/timeline/paged_timeline.h"
#include "views/timeline/timeline_canvas.h"
#include "views/timeline/timeline_layout.h"
#include "views/timeline/timeline_view.h"

using namespace fulcrum;
using namespace fulcrum::views::timeline;
using bench::cell;
using bench::Clock;
using bench::seconds_since;

namespace {

constexpr int kWidth = 1920, kHeight = 1080;

double cpu_seconds() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
           static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

double peak_rss_gb() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return static_cast<double>(usage.ru_maxrss) / (1024.0 * 1024.0);  // KiB on Linux
}

double rss_gb() {
    std::ifstream statm("/proc/self/statm");
    long pages = 0, resident = 0;
    statm >> pages >> resident;
    return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) /
           (1024.0 * 1024.0 * 1024.0);
}

double thread_cpu_ms() {
    timespec now{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    return static_cast<double>(now.tv_sec) * 1e3 + static_cast<double>(now.tv_nsec) / 1e6;
}

// Wall time per frame, and the painting thread's CPU time (steadier on a shared machine).
struct Timing {
    double median_ms = 0, p90_ms = 0, cpu_median_ms = 0;
    int frames = 0;
};

template <typename Paint>
Timing time_frames(int frames, Paint paint) {
    std::vector<double> ms, cpu;
    for (int i = 0; i < frames; ++i) {
        const auto start = Clock::now();
        const double cpu_start = thread_cpu_ms();
        paint();
        ms.push_back(seconds_since(start) * 1e3);
        cpu.push_back(thread_cpu_ms() - cpu_start);
    }
    std::sort(ms.begin(), ms.end());
    std::sort(cpu.begin(), cpu.end());
    Timing t;
    t.frames = static_cast<int>(ms.size());
    t.median_ms = ms[ms.size() / 2];
    t.p90_ms = ms[std::min(ms.size() - 1, static_cast<std::size_t>(ms.size() * 0.9))];
    t.cpu_median_ms = cpu[cpu.size() / 2];
    return t;
}

struct Zoom {
    const char* name;
    std::int64_t start, end;
};

// The whole run, about its second step (the run's span over its steps), 1 ms in the middle.
std::vector<Zoom> zooms_of(int steps, std::int64_t run_start, std::int64_t run_end) {
    const std::int64_t middle = (run_start + run_end) / 2;
    const std::int64_t step = (run_end - run_start) / std::max(1, steps);
    const std::int64_t second = steps > 1 ? run_start + step : run_start;
    return {{"whole run", run_start, run_end},
            {"one step", second, second + step},
            {"1 ms", middle - 500'000, middle + 500'000}};
}

// Runs `work` in a child process, which hands back a plain struct through a pipe; nullopt
// when it failed. Keeps the child's memory out of this process's peak RSS.
template <typename Figures, typename Work>
std::optional<Figures> in_child(Work work) {
    std::fflush(stdout);
    int fds[2];
    if (pipe(fds) != 0) {
        return std::nullopt;
    }
    const pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        const std::optional<Figures> figures = work();
        std::fflush(stdout);
        const bool sent = figures && write(fds[1], &*figures, sizeof(Figures)) == sizeof(Figures);
        _exit(sent ? 0 : 3);
    }
    close(fds[1]);
    Figures figures{};
    const bool got = read(fds[0], &figures, sizeof figures) == sizeof figures;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!got || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        return std::nullopt;
    }
    return figures;
}

bool has_summaries(const std::string& path) {
    auto reader = store::TraceReader::open(path);
    if (!reader) {
        return false;
    }
    auto summaries = reader->lane_summaries();
    return summaries && *summaries;
}

struct Prepared {
    int steps = 0;
    std::int64_t events = 0;
};

// Makes the run unless the file already is it, then its summaries unless it has them.
// Prints what each took.
std::optional<Prepared> prepare(const std::string& path, int ranks, std::int64_t events) {
    auto options = bench::scale_run_options(ranks, events);
    if (!options) {
        std::fprintf(stderr, "bench_timeline_scale: %s\n", options.error().message.c_str());
        return std::nullopt;
    }
    auto file = bench::make_scale_run(path, *options);
    if (!file) {
        std::fprintf(stderr, "bench_timeline_scale: %s\n", file.error().message.c_str());
        return std::nullopt;
    }
    if (!file->kept) {
        std::printf(
            "make_scale_run %s: %lld events, %d ranks, %d steps in %.1f s (%.2f M "
            "events/s), %.0f MB\n",
            path.c_str(), static_cast<long long>(file->events), ranks, file->steps, file->seconds,
            static_cast<double>(file->events) / file->seconds / 1e6,
            static_cast<double>(file->bytes) / 1e6);
    }
    if (!has_summaries(path)) {
        const auto start = Clock::now();
        const double cpu = cpu_seconds();
        if (auto built = store::build_lane_summaries(path); !built) {
            std::fprintf(stderr, "bench_timeline_scale: %s\n", built.error().message.c_str());
            return std::nullopt;
        }
        std::printf(
            "build_lane_summaries %s (%lld events): %.1f s (%.1f CPU s), file %.0f → "
            "%.0f MB\n",
            path.c_str(), static_cast<long long>(file->events), seconds_since(start),
            cpu_seconds() - cpu, static_cast<double>(file->bytes) / 1e6,
            static_cast<double>(std::filesystem::file_size(path)) / 1e6);
    }
    return Prepared{file->steps, file->events};
}

// What the baseline child reports back through a pipe.
struct BaselineFigures {
    double open_s = 0, open_cpu_s = 0, peak_rss_gb = 0;
    std::int64_t events = 0;
    Timing frames[3];
};

BaselineFigures run_baseline(const std::string& path, int steps, int frames) {
    BaselineFigures figures;
    const auto start = Clock::now();
    const double cpu = cpu_seconds();
    auto reader = store::TraceReader::open(path);
    if (!reader) {
        return figures;
    }
    auto trace = analysis::load_run_trace(*reader);
    if (!trace) {
        return figures;
    }
    const Layout layout = build_layout(*trace);
    LaneTreeModel model;
    TimelineCanvas canvas;
    canvas.resize(kWidth, kHeight);
    model.set_run(&*trace, &layout);
    canvas.set_data(&*trace, &layout, &model);
    QImage image(kWidth, kHeight, QImage::Format_RGB32);
    canvas.render(&image);
    figures.open_s = seconds_since(start);
    figures.open_cpu_s = cpu_seconds() - cpu;
    figures.events = layout.events;
    const auto zooms = zooms_of(steps, layout.start_ns, layout.end_ns);
    for (std::size_t z = 0; z < zooms.size(); ++z) {
        canvas.set_window(zooms[z].start, zooms[z].end);
        figures.frames[z] = time_frames(frames, [&] { canvas.render(&image); });
    }
    figures.peak_rss_gb = peak_rss_gb();
    return figures;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"bench_timeline_scale: the paged timeline of a 1024-rank, 100M-event run"};
    const auto tmp = std::filesystem::temp_directory_path();
    std::string run_path = (tmp / "fulcrum-bench-timeline-scale.fulcrum").string();
    std::string baseline_path = (tmp / "fulcrum-bench-timeline-scale-baseline.fulcrum").string();
    std::int64_t target = 100'000'000;
    std::int64_t baseline_target = 10'000'000;
    std::int32_t ranks = 1024;
    int frames = 30;
    app.add_option("--run", run_path, "The run; made (and kept) when it is not the one asked for")
        ->capture_default_str();
    app.add_option("--events", target, "Events of the run")->capture_default_str();
    app.add_option("--ranks", ranks, "Ranks of the run (a multiple of 64)")->capture_default_str();
    app.add_option("--baseline-run", baseline_path, "The baseline's run")->capture_default_str();
    app.add_option("--baseline-events", baseline_target,
                   "Events of the baseline run, held whole in memory (0: no baseline)")
        ->capture_default_str();
    app.add_option("--frames", frames, "Frames per zoom level")->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) {
        qputenv("QT_QPA_PLATFORM", "offscreen");
    }

    const auto run = in_child<Prepared>([&] { return prepare(run_path, ranks, target); });
    if (!run) {
        return 2;
    }
    // The baseline first, in a child, so that its memory is not this process's.
    BaselineFigures baseline;
    if (baseline_target > 0) {
        const auto made =
            in_child<Prepared>([&] { return prepare(baseline_path, ranks, baseline_target); });
        if (!made) {
            return 2;
        }
        const auto figures = in_child<BaselineFigures>([&]() -> std::optional<BaselineFigures> {
            QApplication qt(argc, argv);
            BaselineFigures measured = run_baseline(baseline_path, made->steps, frames);
            return measured.events > 0 ? std::optional(measured) : std::nullopt;
        });
        if (!figures) {
            std::fprintf(stderr, "bench_timeline_scale: the baseline failed\n");
            return 2;
        }
        baseline = *figures;
    }

    QApplication qt(argc, argv);
    const auto start = Clock::now();
    const double cpu = cpu_seconds();
    auto opened = views::open_run(QString::fromStdString(run_path));
    if (!opened) {
        std::fprintf(stderr, "bench_timeline_scale: %s\n", opened.error().message.c_str());
        return 2;
    }
    const double open_run_s = seconds_since(start);
    views::TimelineView view;
    view.resize(kWidth, kHeight);
    view.set_run(*opened);
    TimelineCanvas& canvas = *view.canvas();
    canvas.resize(kWidth, kHeight);
    QImage image(kWidth, kHeight, QImage::Format_RGB32);
    canvas.render(&image);
    const double first_frame_s = seconds_since(start);
    const double first_frame_cpu = cpu_seconds() - cpu;
    const double rss_at_first_frame = rss_gb();
    const std::int64_t first_bins = canvas.painted_bins();
    if (!(*opened)->paged() || view.paged() == nullptr) {
        std::fprintf(stderr, "bench_timeline_scale: the run did not open paged (%s)\n",
                     qPrintable((*opened)->notice));
        return 2;
    }
    PagedTimeline& paged = *view.paged();

    // Until a frame draws every visible row from detail (0 when it already does), or until no
    // read is coming: a window whose detail would exceed kDetailEventBudget stays drawn from
    // the summaries (`over_budget`), and waiting for it would only run into the 60 s guard.
    struct DetailWait {
        double seconds = 0;
        bool over_budget = false;
    };
    auto wait_for_detail = [&] {
        const auto begin = Clock::now();
        bool over_budget = false;
        for (;;) {
            canvas.render(&image);
            if (canvas.painted_bins() == 0 || seconds_since(begin) > 60) {
                break;
            }
            const std::uint64_t reads = paged.loads();
            paged.wait_idle();
            QCoreApplication::processEvents();
            if (paged.loads() == reads) {  // nothing was read: adopted already, or never
                canvas.render(&image);
                over_budget = canvas.painted_bins() > 0;
                break;
            }
        }
        return DetailWait{seconds_since(begin), over_budget};
    };

    // Frames from the summaries alone, at every zoom, before any detail is adopted (the
    // event loop has not run): what the user sees while the detail is read.
    const auto zooms =
        zooms_of(run->steps, paged.skeleton_layout().start_ns, paged.skeleton_layout().end_ns);
    std::vector<Timing> summary_frames;
    std::vector<std::int64_t> summary_bins;
    for (const Zoom& zoom : zooms) {
        canvas.set_window(zoom.start, zoom.end);
        summary_frames.push_back(time_frames(frames, [&] { canvas.render(&image); }));
        summary_bins.push_back(canvas.painted_bins());
    }
    canvas.set_window(zooms[0].start, zooms[0].end);
    const double first_frames_s = seconds_since(start);
    const DetailWait first_detail = wait_for_detail();

    using Align = TextTable::Align;
    TextTable table({"measurement", "median", "p90", "vs baseline", "target"},
                    {Align::left, Align::right, Align::right, Align::right, Align::left});
    if (baseline_target > 0) {
        table.add_row({"baseline: in-memory open to first frame, " +
                           std::to_string(baseline.events / 1'000'000) + "M events (" +
                           cell(baseline.open_cpu_s, "%.1f") + " CPU s)",
                       cell(baseline.open_s, "%.2f s"), "", "1.00x", ""});
        table.add_row({"baseline: in-memory peak RSS", cell(baseline.peak_rss_gb, "%.2f GiB"), "",
                       "1.00x", ""});
    }
    const double open_ratio = baseline_target > 0 ? first_frame_s / baseline.open_s : 0;
    table.add_row(
        {"paged: open_run (summaries + metadata)", cell(open_run_s, "%.2f s"), "", "", ""});
    table.add_row({"paged: open to first frame (" + cell(first_frame_cpu, "%.1f") + " CPU s, " +
                       std::to_string(first_bins) + " bins)",
                   cell(first_frame_s, "%.2f s"), "", cell(open_ratio, "%.2fx"), "<= 5 s"});
    table.add_row(
        {"paged: open to first detail (visible rows, whole run; after the summary "
         "frames below)",
         first_detail.over_budget ? "none: over the detail budget, summaries drawn"
                                  : cell(first_frames_s + first_detail.seconds, "%.2f s"),
         "", "", ""});

    for (std::size_t z = 0; z < zooms.size(); ++z) {
        const Zoom& zoom = zooms[z];
        canvas.set_window(zoom.start, zoom.end);
        const Timing& summary = summary_frames[z];
        const std::int64_t bins = summary_bins[z];
        const std::uint64_t reads = paged.loads();
        const DetailWait arrival = wait_for_detail();
        const bool read = paged.loads() > reads;
        const Timing detail = time_frames(frames, [&] { canvas.render(&image); });
        const std::string loaded =
            arrival.over_budget ? "none: over the detail budget, summaries drawn"
            : !paged.detail()   ? "none"
            : read              ? "read " + std::to_string(paged.detail()->events) + " events"
                                : "no read: the last detail covers it";
        table.add_row(
            {std::string("paged frame, summaries: ") + zoom.name + " (" + std::to_string(bins) +
                 " bins; " + cell(summary.cpu_median_ms, "%.1f") + " ms CPU)",
             cell(summary.median_ms, "%.1f ms"), cell(summary.p90_ms, "%.1f ms"),
             baseline_target > 0 ? cell(summary.median_ms / baseline.frames[z].median_ms, "%.2fx")
                                 : "",
             "<= 16 ms"});
        table.add_row(
            {std::string("paged: until drawn from detail, ") + zoom.name + " (" + loaded + ")",
             cell(arrival.seconds * 1e3, "%.0f ms"), "", "", ""});
        table.add_row({std::string("paged frame, detail: ") + zoom.name + " (" +
                           std::to_string(canvas.painted_boxes()) + " boxes, " +
                           std::to_string(canvas.painted_folds()) + " folds; " +
                           cell(detail.cpu_median_ms, "%.1f") + " ms CPU)",
                       cell(detail.median_ms, "%.1f ms"), cell(detail.p90_ms, "%.1f ms"),
                       baseline_target > 0
                           ? cell(detail.median_ms / baseline.frames[z].median_ms, "%.2fx")
                           : "",
                       "<= 16 ms"});
        if (baseline_target > 0) {
            table.add_row({std::string("baseline frame, in-memory: ") + zoom.name + " (" +
                               cell(baseline.frames[z].cpu_median_ms, "%.1f") + " ms CPU)",
                           cell(baseline.frames[z].median_ms, "%.1f ms"),
                           cell(baseline.frames[z].p90_ms, "%.1f ms"), "1.00x", ""});
        }
    }
    // Rows not read yet: the last ranks, at one step's zoom. The first frame draws them from
    // the summaries, then a read brings their window in.
    {
        canvas.set_window(zooms[1].start, zooms[1].end);
        canvas.set_scroll(canvas.content_height());
        const std::uint64_t reads = paged.loads();
        const auto begin = Clock::now();
        canvas.render(&image);
        const double first_ms = seconds_since(begin) * 1e3;
        const std::int64_t bins = canvas.painted_bins();
        const DetailWait arrival = wait_for_detail();
        const Timing detail = time_frames(frames, [&] { canvas.render(&image); });
        table.add_row({"paged: scrolled to the last ranks, one step: first frame (" +
                           std::to_string(bins) + " bins)",
                       cell(first_ms, "%.1f ms"), "", "", "<= 16 ms"});
        table.add_row({"paged: until drawn from detail (" + std::to_string(paged.loads() - reads) +
                           " read, " + std::to_string(paged.detail()->events) + " events)",
                       cell(arrival.seconds * 1e3, "%.0f ms"), "", "", ""});
        table.add_row({"paged frame, detail: last ranks, one step (" +
                           std::to_string(canvas.painted_boxes()) + " boxes; " +
                           cell(detail.cpu_median_ms, "%.1f") + " ms CPU)",
                       cell(detail.median_ms, "%.1f ms"), cell(detail.p90_ms, "%.1f ms"), "",
                       "<= 16 ms"});
    }
    const double peak = peak_rss_gb();
    table.add_row({"paged: RSS at first frame", cell(rss_at_first_frame, "%.2f GiB"), "", "", ""});
    table.add_row({"paged: peak RSS (whole bench process)", cell(peak, "%.2f GiB"), "",
                   baseline_target > 0 ? cell(peak / baseline.peak_rss_gb, "%.2fx") : "",
                   "<= 3 GB"});
    std::printf("\n%lld events, %d ranks, %zu rows, 1920x1080 frames; detail reads: %llu\n%s",
                static_cast<long long>((*opened)->events), ranks,
                paged.skeleton_layout().rows.size(), static_cast<unsigned long long>(paged.loads()),
                table.render().c_str());
    return 0;
}
