#include "core/store/lane_summary.h"

#include <sqlite3.h>
#include <zstd.h>

#include <algorithm>

namespace fulcrum::store {

namespace {

// Nesting the timeline can show (views/timeline/timeline_layout.h, kMaxDepth): deeper events
// of a broken trace get no sub-row there, so none here either.
constexpr std::size_t kMaxDepth = 255;

void put_varint(std::string& out, std::uint64_t value) {
    while (value >= 0x80) {
        out.push_back(static_cast<char>((value & 0x7f) | 0x80));
        value >>= 7;
    }
    out.push_back(static_cast<char>(value));
}

std::uint64_t zigzag(std::int64_t v) {
    return (static_cast<std::uint64_t>(v) << 1) ^ static_cast<std::uint64_t>(v >> 63);
}
std::int64_t unzigzag(std::uint64_t v) {
    return static_cast<std::int64_t>(v >> 1) ^ -static_cast<std::int64_t>(v & 1);
}

struct Cursor {
    std::string_view bytes;
    std::size_t at = 0;
    bool ok = true;

    std::uint64_t varint() {
        std::uint64_t value = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (at >= bytes.size()) {
                break;
            }
            const auto byte = static_cast<std::uint8_t>(bytes[at++]);
            value |= std::uint64_t{byte & 0x7fu} << shift;
            if ((byte & 0x80) == 0) {
                return value;
            }
        }
        ok = false;
        return 0;
    }
    std::uint8_t byte() {
        if (at >= bytes.size()) {
            ok = false;
            return 0;
        }
        return static_cast<std::uint8_t>(bytes[at++]);
    }
};

// Merges bins two by two (or four by four, ...): index >> by.
std::vector<SummaryBin> coarser(const std::vector<SummaryBin>& bins, int by) {
    std::vector<SummaryBin> out;
    for (const SummaryBin& bin : bins) {
        const std::int64_t index = bin.index >> by;
        if (out.empty() || out.back().index != index) {
            out.push_back(bin);
            out.back().index = index;
            continue;
        }
        SummaryBin& into = out.back();
        into.busy_ns += bin.busy_ns;
        into.events += bin.events;
        into.max_depth = std::max(into.max_depth, bin.max_depth);
        if (bin.dominant_ns > into.dominant_ns || into.name.value == 0) {
            into.dominant_ns = bin.dominant_ns;
            into.name = bin.name;
            into.category = bin.category;
        }
    }
    return out;
}

std::int64_t span_of(const std::vector<SummaryBin>& bins) {
    return bins.empty() ? 0 : bins.back().index - bins.front().index + 1;
}

std::string encode(const LaneSummary& summary) {
    std::string raw;
    put_varint(raw, summary.levels.size());
    for (const SummaryLevel& level : summary.levels) {
        put_varint(raw, static_cast<std::uint64_t>(level.shift));
        put_varint(raw, level.bins.size());
        std::int64_t previous = 0;
        for (const SummaryBin& bin : level.bins) {
            put_varint(raw, zigzag(bin.index - previous));
            previous = bin.index;
            put_varint(raw, static_cast<std::uint64_t>(bin.busy_ns));
            put_varint(raw, static_cast<std::uint64_t>(bin.dominant_ns));
            put_varint(raw, bin.name.value);
            raw.push_back(static_cast<char>(bin.category));
            raw.push_back(static_cast<char>(bin.max_depth));
            put_varint(raw, bin.events);
        }
    }
    std::string packed(ZSTD_compressBound(raw.size()), '\0');
    const std::size_t size = ZSTD_compress(packed.data(), packed.size(), raw.data(), raw.size(), 1);
    packed.resize(ZSTD_isError(size) ? 0 : size);
    return packed;
}

bool decode(std::string_view data, LaneSummary& summary) {
    const unsigned long long raw_size = ZSTD_getFrameContentSize(data.data(), data.size());
    if (raw_size == ZSTD_CONTENTSIZE_ERROR || raw_size == ZSTD_CONTENTSIZE_UNKNOWN ||
        raw_size > (std::uint64_t{1} << 32)) {
        return false;
    }
    std::string raw(static_cast<std::size_t>(raw_size), '\0');
    const std::size_t size = ZSTD_decompress(raw.data(), raw.size(), data.data(), data.size());
    if (ZSTD_isError(size) || size != raw.size()) {
        return false;
    }
    Cursor in{raw};
    const std::uint64_t levels = in.varint();
    if (!in.ok || levels > 64) {
        return false;
    }
    for (std::uint64_t l = 0; l < levels && in.ok; ++l) {
        SummaryLevel level;
        level.shift = static_cast<int>(in.varint());
        const std::uint64_t bins = in.varint();
        // Every bin takes at least 7 bytes: a count past what is left is damage.
        if (!in.ok || level.shift > 62 || bins > raw.size()) {
            return false;
        }
        level.bins.resize(static_cast<std::size_t>(bins));
        std::int64_t previous = 0;
        for (SummaryBin& bin : level.bins) {
            bin.index = previous + unzigzag(in.varint());
            previous = bin.index;
            bin.busy_ns = static_cast<std::int64_t>(in.varint());
            bin.dominant_ns = static_cast<std::int64_t>(in.varint());
            bin.name = StringId{static_cast<std::uint32_t>(in.varint())};
            bin.category = static_cast<Category>(in.byte());
            bin.max_depth = in.byte();
            bin.events = static_cast<std::uint32_t>(in.varint());
        }
        summary.levels.push_back(std::move(level));
    }
    return in.ok && in.at == raw.size();
}

}  // namespace

const SummaryLevel* LaneSummary::level_for(double ns_per_bin) const {
    const SummaryLevel* best = levels.empty() ? nullptr : &levels.front();
    for (const SummaryLevel& level : levels) {
        if (static_cast<double>(level.bin_ns()) <= ns_per_bin) {
            best = &level;
        }
    }
    return best;
}

SummaryBin& LaneSummaryBuilder::bin_at(std::int64_t index) {
    if (!bins_.empty() && bins_.back().index == index) {
        return bins_.back();
    }
    if (bins_.empty() || bins_.back().index < index) {
        bins_.push_back({});
        bins_.back().index = index;
        return bins_.back();
    }
    auto it = std::lower_bound(bins_.begin(), bins_.end(), index,
                               [](const SummaryBin& bin, std::int64_t i) { return bin.index < i; });
    if (it == bins_.end() || it->index != index) {
        it = bins_.insert(it, SummaryBin{});
        it->index = index;
    }
    return *it;
}

void LaneSummaryBuilder::coarsen() {
    bins_ = coarser(bins_, 1);
    ++shift_;
}

void LaneSummaryBuilder::cover(const Event& event) {
    const std::int64_t first = event.start_ns >> shift_;
    const std::int64_t last = (std::max(event.end_ns, event.start_ns + 1) - 1) >> shift_;
    for (std::int64_t index = first; index <= last; ++index) {
        const std::int64_t bin_start = index << shift_;
        const std::int64_t overlap =
            std::min(event.end_ns, bin_start + (std::int64_t{1} << shift_)) -
            std::max(event.start_ns, bin_start);
        SummaryBin& bin = bin_at(index);
        bin.busy_ns += std::max<std::int64_t>(overlap, 0);
        if (overlap > bin.dominant_ns || bin.name.value == 0) {
            bin.dominant_ns = std::max<std::int64_t>(overlap, 0);
            bin.name = event.name;
            bin.category = event.category;
        }
    }
}

void LaneSummaryBuilder::add(const Event& event) {
    if (summary_.events == 0) {
        first_start_ = event.start_ns;
        summary_.start_ns = event.start_ns;
        summary_.end_ns = event.end_ns;
    }
    ++summary_.events;
    summary_.end_ns = std::max(summary_.end_ns, event.end_ns);
    while (!open_ends_.empty() && open_ends_.back() <= event.start_ns) {
        open_ends_.pop_back();
    }
    const std::size_t depth = open_ends_.size();
    if (depth < kMaxDepth) {
        open_ends_.push_back(event.end_ns);
        summary_.depths = std::max(summary_.depths, static_cast<int>(depth) + 1);
    }
    // Keep level 0 within kSummaryBins bins of the lane's first start, counting the bins a
    // top-level event covers, before touching any of them.
    const std::int64_t reach =
        depth == 0 ? std::max(event.end_ns, event.start_ns + 1) - 1 : event.start_ns;
    while ((reach >> shift_) - (first_start_ >> shift_) + 1 > kSummaryBins && shift_ < 62) {
        coarsen();
    }
    SummaryBin& bin = bin_at(event.start_ns >> shift_);
    ++bin.events;
    if (depth < kMaxDepth) {
        bin.max_depth = std::max(bin.max_depth, static_cast<std::uint8_t>(depth));
    }
    if (depth == 0) {
        cover(event);
    }
}

LaneSummary LaneSummaryBuilder::finish() && {
    SummaryLevel level{shift_, std::move(bins_)};
    summary_.levels.push_back(std::move(level));
    while (span_of(summary_.levels.back().bins) > kSummaryMinBins &&
           summary_.levels.back().shift + kSummaryLevelStep <= 62) {
        const SummaryLevel& finer = summary_.levels.back();
        SummaryLevel next{finer.shift + kSummaryLevelStep, coarser(finer.bins, kSummaryLevelStep)};
        summary_.levels.push_back(std::move(next));
    }
    return std::move(summary_);
}

void RunSummaryBuilder::add(const Event& event) {
    const std::size_t lane = event.lane.value;
    if (lane >= by_lane_.size()) {
        by_lane_.resize(lane + 1);
    }
    if (!by_lane_[lane]) {
        by_lane_[lane].emplace(event.lane);
    }
    by_lane_[lane]->add(event);
}

void RunSummaryBuilder::take(RunSummaryBuilder&& other) {
    if (other.by_lane_.size() > by_lane_.size()) {
        by_lane_.resize(other.by_lane_.size());
    }
    for (std::size_t lane = 0; lane < other.by_lane_.size(); ++lane) {
        if (other.by_lane_[lane]) {
            by_lane_[lane] = std::move(other.by_lane_[lane]);
        }
    }
    other.by_lane_.clear();
}

std::vector<LaneSummary> RunSummaryBuilder::finish(const std::vector<LaneId>& every_lane) && {
    for (const LaneId lane : every_lane) {
        if (lane.value >= by_lane_.size()) {
            by_lane_.resize(lane.value + 1);
        }
        if (!by_lane_[lane.value]) {
            by_lane_[lane.value].emplace(lane);
        }
    }
    std::vector<LaneSummary> summaries;
    for (std::optional<LaneSummaryBuilder>& builder : by_lane_) {
        if (builder) {
            summaries.push_back(std::move(*builder).finish());
        }
    }
    by_lane_.clear();
    return summaries;
}

Status write_lane_summaries(Database& db, const std::vector<LaneSummary>& summaries) {
    auto created = db.exec(R"(
        CREATE TABLE IF NOT EXISTS lane_summary (
            lane     INTEGER PRIMARY KEY,
            events   INTEGER NOT NULL,
            start_ns INTEGER NOT NULL,
            end_ns   INTEGER NOT NULL,
            depths   INTEGER NOT NULL,
            format   INTEGER NOT NULL,
            data     BLOB NOT NULL
        ))");
    if (!created) {
        return created;
    }
    auto insert =
        db.prepare("INSERT OR REPLACE INTO lane_summary VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
    if (!insert) {
        return insert.error();
    }
    for (const LaneSummary& summary : summaries) {
        const std::string data = encode(summary);
        if (data.empty()) {
            return Error{ErrorCode::io, "cannot compress the timeline summary of lane " +
                                            std::to_string(summary.lane.value)};
        }
        insert->reset();
        insert->bind(1, std::int64_t{summary.lane.value});
        insert->bind(2, summary.events);
        insert->bind(3, summary.start_ns);
        insert->bind(4, summary.end_ns);
        insert->bind(5, std::int64_t{summary.depths});
        insert->bind(6, std::int64_t{kNewestSummaryFormat});
        insert->bind_blob(7, data);
        if (!insert->run()) {
            return db.error_for("writing the timeline summaries");
        }
    }
    return {};
}

Result<std::optional<std::vector<LaneSummary>>> read_lane_summaries(Database& db) {
    if (!db.has_table("lane_summary")) {
        return std::optional<std::vector<LaneSummary>>{};
    }
    auto select = db.prepare(
        "SELECT lane, events, start_ns, end_ns, depths, format, data FROM lane_summary ORDER BY "
        "lane");
    if (!select) {
        return select.error();
    }
    std::vector<LaneSummary> summaries;
    while (select->step()) {
        LaneSummary summary;
        summary.lane = LaneId{static_cast<std::uint32_t>(select->column_int64(0))};
        summary.events = select->column_int64(1);
        summary.start_ns = select->column_int64(2);
        summary.end_ns = select->column_int64(3);
        summary.depths = static_cast<int>(select->column_int64(4));
        const std::int64_t format = select->column_int64(5);
        if (format != kNewestSummaryFormat || summary.depths < 0 ||
            summary.depths > static_cast<int>(kMaxDepth) ||
            !decode(select->column_blob(6), summary)) {
            return Error{ErrorCode::corrupt,
                         "the timeline summary of lane " + std::to_string(summary.lane.value) +
                             " in '" + db.path() +
                             "' is damaged or in a format this build does not know (format " +
                             std::to_string(format) + ")"};
        }
        summaries.push_back(std::move(summary));
    }
    if (select->last_result() != SQLITE_DONE) {
        return db.error_for("reading the timeline summaries");
    }
    return std::optional<std::vector<LaneSummary>>{std::move(summaries)};
}

}  // namespace fulcrum::store
