#include "views/timeline/paged_timeline.h"

#include <QMetaObject>
#include <algorithm>
#include <unordered_map>

namespace fulcrum::views::timeline {

namespace {

// Every row keeps the sub-rows its whole lane needs, whatever part of it is loaded.
void pad_depths(Layout& layout, const std::vector<const store::LaneSummary*>& by_row) {
    for (std::size_t r = 0; r < layout.rows.size(); ++r) {
        const int depths = by_row[r] != nullptr ? std::min(by_row[r]->depths, kMaxDepth) : 0;
        if (layout.rows[r].depths() < depths) {
            layout.rows[r].by_depth.resize(static_cast<std::size_t>(depths));
        }
    }
}

}  // namespace

Result<std::unique_ptr<PagedTimeline>> PagedTimeline::open(
    const std::string& path, const analysis::RunTrace& skeleton,
    std::shared_ptr<const std::vector<store::LaneSummary>> summaries) {
    if (summaries == nullptr) {
        return Error{ErrorCode::invalid_input,
                     "'" + path + "' has no timeline summaries (lane_summary)"};
    }
    auto reader = store::TraceReader::open(path);
    if (!reader) {
        return reader.error();
    }
    std::unique_ptr<PagedTimeline> paged(new PagedTimeline);
    paged->skeleton_ = &skeleton;
    paged->summaries_ = std::move(summaries);
    paged->reader_.emplace(std::move(*reader));
    paged->skeleton_layout_ = build_layout(skeleton, 1);
    std::unordered_map<std::uint32_t, const store::LaneSummary*> by_lane;
    for (const store::LaneSummary& summary : *paged->summaries_) {
        by_lane[summary.lane.value] = &summary;
        paged->events_ += summary.events;
    }
    Layout& layout = paged->skeleton_layout_;
    paged->by_row_.assign(layout.rows.size(), nullptr);
    bool any = false;
    for (std::size_t r = 0; r < layout.rows.size(); ++r) {
        auto it = by_lane.find(layout.rows[r].lane->info.id.value);
        if (it == by_lane.end()) {
            return Error{ErrorCode::corrupt,
                         "'" + path + "' has no timeline summary for lane " +
                             std::to_string(layout.rows[r].lane->info.id.value)};
        }
        const store::LaneSummary& summary = *it->second;
        paged->by_row_[r] = &summary;
        if (summary.events > 0) {
            layout.start_ns = any ? std::min(layout.start_ns, summary.start_ns) : summary.start_ns;
            layout.end_ns = any ? std::max(layout.end_ns, summary.end_ns) : summary.end_ns;
            any = true;
        }
        for (const store::SummaryLevel& level : summary.levels) {
            for (const store::SummaryBin& bin : level.bins) {
                layout.max_name_id = std::max(layout.max_name_id, bin.name.value);
            }
        }
    }
    // Names an event can carry are the file's strings; the canvas sizes its caches by this.
    layout.max_name_id = std::max<std::uint32_t>(
        layout.max_name_id, static_cast<std::uint32_t>(paged->reader_->string_count()));
    layout.events = paged->events_;
    pad_depths(layout, paged->by_row_);
    paged->worker_ = std::thread([p = paged.get()] { p->work(); });
    return paged;
}

PagedTimeline::~PagedTimeline() {
    {
        const std::lock_guard lock(mutex_);
        stop_ = true;
        waiting_.reset();
    }
    wake_.notify_all();
    if (worker_.joinable()) {
        worker_.join();
    }
}

std::int64_t PagedTimeline::estimate(std::int64_t t0, std::int64_t t1,
                                     const std::vector<std::uint32_t>& rows) const {
    std::int64_t total = 0;
    for (std::uint32_t row : rows) {
        const store::LaneSummary* summary = this->summary(row);
        if (summary == nullptr || summary->levels.empty() || summary->end_ns < t0 ||
            summary->start_ns >= t1) {
            continue;
        }
        if (summary->start_ns >= t0 && summary->end_ns <= t1) {
            total += summary->events;
            continue;
        }
        const store::SummaryLevel& level = summary->levels.front();
        const std::int64_t first = t0 >> level.shift;
        const std::int64_t last = (t1 - 1) >> level.shift;
        auto it = std::lower_bound(
            level.bins.begin(), level.bins.end(), first,
            [](const store::SummaryBin& bin, std::int64_t i) { return bin.index < i; });
        for (; it != level.bins.end() && it->index <= last; ++it) {
            total += it->events;
        }
    }
    return total;
}

bool PagedTimeline::covered_by(const Request& have, std::int64_t t0, std::int64_t t1,
                               const std::vector<std::uint32_t>& rows) const {
    if (have.t0 > t0 || have.t1 < t1) {
        return false;
    }
    // Both sorted.
    return std::includes(have.rows.begin(), have.rows.end(), rows.begin(), rows.end());
}

void PagedTimeline::request(std::int64_t t0, std::int64_t t1, std::vector<std::uint32_t> rows) {
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    if (rows.empty() || t1 <= t0) {
        return;
    }
    if (last_asked_ && covered_by(*last_asked_, t0, t1, rows)) {
        return;  // loaded, or on its way
    }
    // Read a wider window than is shown, so that small pans and zooms out need no new read;
    // narrower again when that would go over the budget.
    const std::int64_t span = t1 - t0;
    std::int64_t pad = span;
    while (pad > 0 && estimate(t0 - pad, t1 + pad, rows) > kDetailEventBudget) {
        pad /= 4;
    }
    if (estimate(t0 - pad, t1 + pad, rows) > kDetailEventBudget) {
        return;  // the summaries stay what is drawn
    }
    Request next{t0 - pad, t1 + pad, std::move(rows), next_serial_++};
    last_asked_ = next;
    {
        const std::lock_guard lock(mutex_);
        waiting_ = std::move(next);
    }
    wake_.notify_one();
}

void PagedTimeline::wait_idle() {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [&] { return !waiting_ && !busy_; });
}

void PagedTimeline::work() {
    for (;;) {
        Request request;
        {
            std::unique_lock lock(mutex_);
            wake_.wait(lock, [&] { return stop_ || waiting_.has_value(); });
            if (stop_) {
                return;
            }
            request = std::move(*waiting_);
            waiting_.reset();
            busy_ = true;
        }
        auto detail = load(request);
        // Queued to the GUI thread; dropped there when a newer detail has arrived.
        QMetaObject::invokeMethod(
            this,
            [this, detail = std::move(detail)]() mutable {
                if (!detail) {
                    emit detail_failed(QString::fromStdString(detail.error().message));
                    return;
                }
                if (detail_ == nullptr || (*detail)->serial > detail_->serial) {
                    detail_ = std::move(*detail);
                    ++loads_;
                    emit detail_ready();
                }
            },
            Qt::QueuedConnection);
        {
            const std::lock_guard lock(mutex_);
            busy_ = false;
        }
        idle_.notify_all();
    }
}

Result<std::shared_ptr<PagedDetail>> PagedTimeline::load(const Request& request) {
    auto detail = std::make_shared<PagedDetail>();
    detail->serial = request.serial;
    detail->start_ns = request.t0;
    detail->end_ns = request.t1;
    // The skeleton's ranks and lanes (no events: a cheap copy). Names stay the skeleton's:
    // a run's strings can be millions of args texts, and the canvas reads names from there.
    detail->trace.ranks = skeleton_->ranks;
    detail->loaded.assign(skeleton_layout_.rows.size(), 0);
    for (std::uint32_t row : request.rows) {
        if (row >= skeleton_layout_.rows.size()) {
            continue;
        }
        const LaneRow& where = skeleton_layout_.rows[row];
        auto events = reader_->events_in_window(where.lane->info.id, request.t0, request.t1);
        if (!events) {
            return events.error();
        }
        detail->events += static_cast<std::int64_t>(events->size());
        detail->trace.ranks[where.rank_index].lanes[where.lane_index].events = std::move(*events);
        detail->loaded[row] = 1;
    }
    detail->layout = build_layout(detail->trace, 1);
    pad_depths(detail->layout, by_row_);
    detail->layout.start_ns = skeleton_layout_.start_ns;
    detail->layout.end_ns = skeleton_layout_.end_ns;
    detail->layout.max_name_id = skeleton_layout_.max_name_id;
    return detail;
}

}  // namespace fulcrum::views::timeline
