// The timeline of a run too large to hold: opened from the file's lane summaries (core/store/
// lane_summary.h) and the lane metadata alone, with event detail paged in from disk for the
// window the user looks at.
//
// The canvas draws every frame from what is here: a row whose detail covers the window is
// drawn event by event as for a small run (timeline_layout.h); any other row from its
// summary's bins. After a frame the canvas asks for the detail of its window and visible rows;
// one worker thread reads them (TraceReader::events_in_window: only the blocks that can
// overlap), builds their layout, and hands it over through detail_ready(), and the canvas
// repaints. A request replaces the one waiting; nothing blocks a frame. Detail is bounded by
// kDetailEventBudget events: a window that would hold more stays drawn from the summaries.
#pragma once

#include <QObject>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/analysis/run_trace.h"
#include "core/store/lane_summary.h"
#include "core/store/trace_reader.h"
#include "views/timeline/timeline_layout.h"

namespace fulcrum::views::timeline {

// ~64 bytes an event plus the layout's ~5: 4 M events is ~280 MB, well inside the 3 GB the
// whole GUI may use on a 1024-rank run (issue 18).
inline constexpr std::int64_t kDetailEventBudget = 4'000'000;

// The events of some rows over [start_ns, end_ns), laid out like a whole run: `trace` has
// every rank and lane of the run, empty where not loaded, so rows index the same lanes as
// the skeleton's layout. It has no names: those are the skeleton's (same ids).
struct PagedDetail {
    analysis::RunTrace trace;
    Layout layout;
    std::int64_t start_ns = 0, end_ns = 0;
    std::vector<char> loaded;  // by row
    std::int64_t events = 0;
    std::uint64_t serial = 0;  // the request it answers

    bool covers(std::uint32_t row, std::int64_t t0, std::int64_t t1) const {
        return row < loaded.size() && loaded[row] && start_ns <= t0 && t1 <= end_ns;
    }
};

class PagedTimeline : public QObject {
    Q_OBJECT
public:
    // `skeleton`: the run loaded without events (LoadOptions::read_events = false); it must
    // outlive this. Fails when a lane has no summary (the message says which).
    // `summaries`: the file's lane summaries, read off the GUI thread (views::open_run).
    static Result<std::unique_ptr<PagedTimeline>> open(
        const std::string& path, const analysis::RunTrace& skeleton,
        std::shared_ptr<const std::vector<store::LaneSummary>> summaries);
    ~PagedTimeline() override;

    // Every row of the run with no events, its depths taken from the summaries so that rows
    // keep their height whatever is loaded; start and end span the run.
    const Layout& skeleton_layout() const { return skeleton_layout_; }
    const store::LaneSummary* summary(std::uint32_t row) const {
        return row < by_row_.size() ? by_row_[row] : nullptr;
    }
    std::int64_t events() const { return events_; }

    // Events the summaries count in [t0, t1) on these rows (at the finest level; an upper
    // bound: bins straddle the edges).
    std::int64_t estimate(std::int64_t t0, std::int64_t t1,
                          const std::vector<std::uint32_t>& rows) const;

    // Asks for the detail of `rows` over [t0, t1). Ignored when the current detail or the
    // request in flight already covers it, or when it is over kDetailEventBudget.
    void request(std::int64_t t0, std::int64_t t1, std::vector<std::uint32_t> rows);
    // The newest detail; null until the first arrives. Stays valid while held.
    std::shared_ptr<const PagedDetail> detail() const { return detail_; }
    // For tests and the bench: waits until no request is waiting or being read.
    void wait_idle();
    // Requests read so far (not those dropped as covered or over budget).
    std::uint64_t loads() const { return loads_; }

signals:
    void detail_ready();
    void detail_failed(const QString& message);

private:
    PagedTimeline() = default;
    struct Request {
        std::int64_t t0 = 0, t1 = 0;
        std::vector<std::uint32_t> rows;
        std::uint64_t serial = 0;
    };
    void work();
    Result<std::shared_ptr<PagedDetail>> load(const Request& request);
    bool covered_by(const Request& have, std::int64_t t0, std::int64_t t1,
                    const std::vector<std::uint32_t>& rows) const;

    const analysis::RunTrace* skeleton_ = nullptr;
    std::optional<store::TraceReader> reader_;  // the worker's
    std::shared_ptr<const std::vector<store::LaneSummary>> summaries_;
    std::vector<const store::LaneSummary*> by_row_;
    Layout skeleton_layout_;
    std::int64_t events_ = 0;
    std::shared_ptr<const PagedDetail> detail_;  // GUI thread
    std::uint64_t loads_ = 0;

    std::mutex mutex_;
    std::condition_variable wake_, idle_;
    std::optional<Request> waiting_;
    std::optional<Request> reading_;
    std::optional<Request> last_asked_;  // GUI thread: the newest request taken
    bool busy_ = false;
    bool stop_ = false;
    std::uint64_t next_serial_ = 1;
    std::thread worker_;
};

}  // namespace fulcrum::views::timeline
