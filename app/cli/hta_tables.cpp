#include "app/cli/hta_tables.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <vector>

#include "core/util/text_table.h"

namespace fulcrum::cli {
namespace {

using namespace analysis;
using Align = TextTable::Align;

// Kernel names run to hundreds of characters (templates); a table shows their start.
std::string clipped(const std::string& name, std::size_t limit = 60) {
    if (name.size() <= limit) {
        return name;
    }
    std::size_t end = limit - 1;
    while (end > 0 && (static_cast<unsigned char>(name[end]) & 0xC0) == 0x80) {
        --end;
    }
    return name.substr(0, end) + "…";
}

// Up to four ranks listed; more as the progression they form ("56-63", "0-1528 by 8"), else
// as a count.
std::string rank_list(const std::vector<std::int32_t>& ranks) {
    if (ranks.size() > 4) {
        const std::int32_t step = ranks[1] - ranks[0];
        bool progression = step > 0;
        for (std::size_t i = 2; progression && i < ranks.size(); ++i) {
            progression = ranks[i] - ranks[i - 1] == step;
        }
        if (!progression) {
            return std::to_string(ranks.size()) + " ranks";
        }
        return std::to_string(ranks.front()) + "-" + std::to_string(ranks.back()) +
               (step > 1 ? " by " + std::to_string(step) : "");
    }
    std::string text;
    for (std::int32_t rank : ranks) {
        text += (text.empty() ? "" : ",") + std::to_string(rank);
    }
    return text;
}

std::string shown_of(std::size_t shown, std::size_t all, std::string_view what) {
    return shown < all ? " (" + std::to_string(shown) + " of " + std::to_string(all) + " " +
                             std::string(what) + ")"
                       : "";
}

void render_time_by_type(const KernelAnalysis& k, std::size_t top, std::string& out) {
    if (k.time_by_type.empty()) {
        return;
    }
    const std::size_t shown = std::min(top, k.time_by_type.size());
    out += "\nkernel time by type (per rank; shares of the span from first kernel to last)" +
           shown_of(shown, k.time_by_type.size(), "ranks") + "\n";
    TextTable table({"rank", "span", "computation", "communication", "memory", "comp+comm",
                     "comp+mem", "comm+mem", "all three", "idle"},
                    std::vector<Align>(10, Align::right));
    // KernelTimeByType::ns by the bit set of types running at once, in the columns' order.
    constexpr int kMasks[] = {0b001, 0b010, 0b100, 0b011, 0b101, 0b110, 0b111};
    for (std::size_t i = 0; i < shown; ++i) {
        const KernelTimeByType& row = k.time_by_type[i];
        std::vector<std::string> cells = {std::to_string(row.rank),
                                          format_duration(row.kernel_span_ns)};
        for (int mask : kMasks) {
            cells.push_back(format_percent(row.ns[mask], row.kernel_span_ns));
        }
        cells.push_back(format_percent(row.idle_ns, row.kernel_span_ns));
        table.add_row(std::move(cells));
    }
    out += table.render("  ");
}

void render_top_kernels(const KernelAnalysis& k, std::size_t top, std::string& out) {
    if (k.top_kernels.empty()) {
        return;
    }
    const std::size_t shown = std::min(top, k.top_kernels.size());
    out += "\ntop kernels (by total time over all ranks; spread of the per-rank totals)\n";
    TextTable table(
        {"kernel", "type", "count", "total", "mean", "min", "max", "ranks", "rank min", "rank max",
         "slowest"},
        {Align::left, Align::left, Align::right, Align::right, Align::right, Align::right,
         Align::right, Align::right, Align::right, Align::right, Align::right});
    for (std::size_t i = 0; i < shown; ++i) {
        const KernelStats& s = k.top_kernels[i];
        table.add_row({clipped(s.name), std::string(to_string(s.type)), std::to_string(s.count),
                       format_duration(s.total_ns), format_duration(std::llround(s.mean_ns())),
                       format_duration(s.min_ns), format_duration(s.max_ns),
                       std::to_string(s.ranks), format_duration(s.rank_total_min_ns),
                       format_duration(s.rank_total_max_ns), std::to_string(s.slowest_rank)});
    }
    out += table.render("  ");
}

void render_idle(const KernelAnalysis& k, std::size_t top, std::string& out) {
    if (k.idle.empty()) {
        return;
    }
    // The streams that idled longest, so that thousands of streams still print a short table.
    std::vector<const StreamIdle*> order;
    for (const StreamIdle& row : k.idle) {
        order.push_back(&row);
    }
    std::stable_sort(order.begin(), order.end(), [](const StreamIdle* a, const StreamIdle* b) {
        return a->idle_ns() > b->idle_ns();
    });
    const std::size_t shown = std::min(top, order.size());
    out +=
        "\nidle time by cause (per stream, gaps before each kernel; host wait: launched after the "
        "previous "
        "kernel ended; kernel wait: a gap under 30 µs)" +
        shown_of(shown, order.size(), "streams, the longest idle") + "\n";
    TextTable table({"rank", "stream", "kernels", "idle", "host wait", "kernel wait", "other",
                     "queue mean", "queue max"},
                    {Align::right, Align::left, Align::right, Align::right, Align::right,
                     Align::right, Align::right, Align::right, Align::right});
    for (std::size_t i = 0; i < shown; ++i) {
        const StreamIdle& s = *order[i];
        table.add_row({std::to_string(s.rank), s.lane, std::to_string(s.kernels),
                       format_duration(s.idle_ns()), format_percent(s.host_wait_ns, s.idle_ns()),
                       format_percent(s.kernel_wait_ns, s.idle_ns()),
                       format_percent(s.other_ns, s.idle_ns()),
                       format_fixed(s.mean_queue_length, 2), std::to_string(s.max_queue_length)});
    }
    out += table.render("  ");
}

void render_launches(const KernelAnalysis& k, std::size_t top, std::string& out) {
    if (k.launches.empty()) {
        return;
    }
    const std::size_t shown = std::min(top, k.launches.size());
    out += "\nkernel launches (per rank; delay = kernel start − end of its launch call)" +
           shown_of(shown, k.launches.size(), "ranks") + "\n";
    TextTable table({"rank", "launches", "call (mean)", "kernel (mean)", "delay (mean)",
                     "delay (max)", "short kernels", "calls > 50 µs", "delays > 100 µs"},
                    std::vector<Align>(9, Align::right));
    for (std::size_t i = 0; i < shown; ++i) {
        const LaunchStats& s = k.launches[i];
        table.add_row({std::to_string(s.rank), std::to_string(s.launches),
                       format_duration(s.cpu_total_ns / s.launches),
                       format_duration(s.gpu_total_ns / s.launches),
                       format_duration(std::llround(s.mean_delay_ns())),
                       format_duration(s.delay_max_ns), std::to_string(s.short_kernels),
                       std::to_string(s.slow_calls), std::to_string(s.delay_outliers)});
    }
    out += table.render("  ");
}

// More groups than fit (a 4D run has a TP group per DP × PP × CP coordinate): each name's
// groups together first.
void render_communication_totals(const std::vector<CollectiveTotal>& totals, std::string& out) {
    out +=
        "\ncommunication by collective (per name, its groups together; bandwidths as "
        "NCCL-tests defines them)\n";
    TextTable table(
        {"collective", "kind", "groups", "ranks a group", "calls", "bytes", "transfer", "wait",
         "algbw GB/s", "busbw GB/s", "slowest group busbw"},
        {Align::left, Align::left, Align::right, Align::right, Align::right, Align::right,
         Align::right, Align::right, Align::right, Align::right, Align::right});
    for (const CollectiveTotal& c : totals) {
        const bool measured = c.bytes > 0 && c.transfer_ns > 0;
        table.add_row(
            {clipped(c.name, 40), std::string(to_string(c.kind)), std::to_string(c.groups),
             std::to_string(c.group_size), std::to_string(c.calls),
             c.bytes > 0 ? format_bytes(c.bytes) : kUnknownFigure, format_duration(c.transfer_ns),
             format_duration(c.wait_ns), measured ? format_fixed(c.algbw_gb_s, 2) : kUnknownFigure,
             measured ? format_fixed(c.busbw_gb_s, 2) : kUnknownFigure,
             c.slowest_busbw_gb_s > 0 ? format_fixed(c.slowest_busbw_gb_s, 2) : kUnknownFigure});
    }
    out += table.render("  ");
}

void render_communication(const std::vector<CollectiveSummary>& rows, std::size_t top,
                          std::string& out) {
    if (rows.empty()) {
        return;
    }
    // Past `top` groups, those furthest below their name's bandwidth: where a link or a rank
    // held a collective back.
    const CollectiveListing listing = list_collectives(rows, top);
    const bool folded = listing.folded;
    const std::vector<SlowGroup>& groups = listing.groups;
    if (folded) {
        render_communication_totals(listing.totals, out);
    }
    const std::size_t shown = std::min(top, groups.size());
    out += folded ? "\ncommunication's slowest groups (per name and group, the furthest below "
                    "their name's busbw first)" +
                        shown_of(shown, groups.size(), "groups") + "\n"
                  : "\ncommunication by collective (per name and group; bandwidths as "
                    "NCCL-tests defines them)\n";
    std::vector<std::string> header = {"collective", "kind", "ranks",      "calls",     "bytes",
                                       "transfer",   "wait", "algbw GB/s", "busbw GB/s"};
    std::vector<Align> align = {Align::left,  Align::left,  Align::left,
                                Align::right, Align::right, Align::right,
                                Align::right, Align::right, Align::right};
    if (folded) {
        header.push_back("vs its name");
        align.push_back(Align::right);
    }
    TextTable table(header, align);
    for (std::size_t i = 0; i < shown; ++i) {
        const CollectiveSummary& c = groups[i].group;
        const bool measured = c.bytes > 0 && c.transfer_ns > 0;
        std::vector<std::string> row = {clipped(c.name, 40),
                                        std::string(to_string(c.kind)),
                                        rank_list(c.ranks),
                                        std::to_string(c.calls),
                                        c.bytes > 0 ? format_bytes(c.bytes) : kUnknownFigure,
                                        format_duration(c.transfer_ns),
                                        format_duration(c.wait_ns),
                                        measured ? format_fixed(c.algbw_gb_s, 2) : kUnknownFigure,
                                        measured ? format_fixed(c.busbw_gb_s, 2) : kUnknownFigure};
        if (folded) {
            row.push_back(groups[i].vs_name > 0 ? format_fixed(groups[i].vs_name, 2) + "x"
                                                : kUnknownFigure);
        }
        table.add_row(row);
    }
    out += table.render("  ");
}

// The kinds of segment as columns, the largest share over all steps first.
std::vector<std::string> segment_kinds(const std::vector<CriticalPath>& paths) {
    std::map<std::string, std::int64_t> totals;
    for (const CriticalPath& path : paths) {
        for (const auto& [what, ns] : path.by_what) {
            totals[what] += ns;
        }
    }
    std::vector<std::string> kinds;
    for (const auto& [what, ns] : totals) {
        kinds.push_back(what);
    }
    std::stable_sort(kinds.begin(), kinds.end(), [&](const std::string& a, const std::string& b) {
        return totals[a] > totals[b];
    });
    return kinds;
}

template <typename Key>
std::string largest_share(const std::map<Key, std::int64_t>& shares, std::int64_t whole,
                          const char* label) {
    const auto largest =
        std::max_element(shares.begin(), shares.end(),
                         [](const auto& a, const auto& b) { return a.second < b.second; });
    if (largest == shares.end()) {
        return kUnknownFigure;
    }
    return std::string(label) + " " + std::to_string(largest->first) + " (" +
           format_percent(largest->second, whole) + ")";
}

void render_critical_steps(const std::vector<CriticalPath>& paths, std::size_t top,
                           std::string& out) {
    const std::vector<std::string> kinds = segment_kinds(paths);
    const std::size_t shown = std::min(top, paths.size());
    out +=
        "\ncritical path per step (the chain of work that set the step's length; shares of its "
        "length)" +
        shown_of(shown, paths.size(), "steps") + "\n";
    std::vector<std::string> headers = {"step",  "length",       "segments",
                                        "ranks", "largest rank", "largest stage"};
    for (const std::string& kind : kinds) {
        headers.push_back(kind);
    }
    std::vector<Align> aligns(headers.size(), Align::right);
    TextTable table(headers, aligns);
    for (std::size_t i = 0; i < shown; ++i) {
        const CriticalPath& path = paths[i];
        const std::int64_t length = path.end_ns - path.start_ns;
        std::vector<std::string> cells = {std::to_string(path.step),
                                          format_duration(length),
                                          std::to_string(path.segments.size()),
                                          std::to_string(path.by_rank.size()),
                                          largest_share(path.by_rank, length, "rank"),
                                          largest_share(path.by_stage, length, "stage")};
        for (const std::string& kind : kinds) {
            const auto found = path.by_what.find(kind);
            cells.push_back(found != path.by_what.end() ? format_percent(found->second, length)
                                                        : "0.0%");
        }
        table.add_row(std::move(cells));
    }
    out += table.render("  ");
}

void render_what_ifs(const std::vector<CriticalPath>& paths, std::size_t top, std::string& out) {
    std::vector<std::pair<std::int32_t, const WhatIf*>> all;
    for (const CriticalPath& path : paths) {
        for (const WhatIf& what : path.what_if) {
            all.emplace_back(path.step, &what);
        }
    }
    if (all.empty()) {
        return;
    }
    std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
        return a.second->step_saving_ns > b.second->step_saving_ns;
    });
    const std::size_t shown = std::min(top, all.size());
    out +=
        "  what if a critical pass took its stage's mean (the pipeline replayed; the largest "
        "savings)" +
        shown_of(shown, all.size(), "passes") + "\n";
    TextTable table(
        {"step", "rank", "stage", "micro-batch", "phase", "busy", "stage mean", "step saving"},
        {Align::right, Align::right, Align::right, Align::right, Align::left, Align::right,
         Align::right, Align::right});
    for (std::size_t i = 0; i < shown; ++i) {
        const WhatIf& w = *all[i].second;
        table.add_row({std::to_string(all[i].first), std::to_string(w.rank),
                       std::to_string(w.stage), std::to_string(w.microbatch),
                       std::string(to_string(w.phase)), format_duration(w.busy_ns),
                       format_duration(w.typical_ns), format_duration(w.step_saving_ns)});
    }
    out += table.render("  ");
}

}  // namespace

void render_hta_tables(const RunAnalysis& analysis, int top, std::string& out) {
    const std::size_t rows = static_cast<std::size_t>(std::max(top, 1));
    if (!analysis.has_device_activity) {
        out +=
            "\nkernels: no device activity (kernels, copies, memsets) in this run; kernel time by "
            "type, "
            "top kernels, idle time by cause and launches need a GPU capture or an imported GPU "
            "trace\n";
    }
    render_time_by_type(analysis.kernels, rows, out);
    render_top_kernels(analysis.kernels, rows, out);
    render_idle(analysis.kernels, rows, out);
    render_launches(analysis.kernels, rows, out);
    render_communication(analysis.communication, rows, out);
    if (!analysis.critical_paths.empty()) {
        render_critical_steps(analysis.critical_paths, rows, out);
        render_what_ifs(analysis.critical_paths, std::min<std::size_t>(rows, 8), out);
    }
}

std::string render_diff(const RunDiff& diff, std::string_view a, std::string_view b, int top) {
    std::string out =
        "A  " + std::string(a) + " (per step, over " + std::to_string(diff.steps_a) + ")\n";
    out += "B  " + std::string(b) + " (per step, over " + std::to_string(diff.steps_b) + ")\n";
    std::size_t added = 0, removed = 0;
    for (const NameDiff& row : diff.rows) {
        added += row.added();
        removed += row.removed();
    }
    const std::size_t shown =
        std::min<std::size_t>(static_cast<std::size_t>(std::max(top, 1)), diff.rows.size());
    out += "\n" + std::to_string(diff.rows.size()) + " names: " + std::to_string(added) +
           " added, " + std::to_string(removed) + " removed, " +
           std::to_string(diff.rows.size() - added - removed) +
           " in both; by the change in time per step" + shown_of(shown, diff.rows.size(), "names") +
           "\n";
    TextTable table({"name", "kind", "change", "count A", "count B", "time A", "time B", "Δ time"},
                    {Align::left, Align::left, Align::left, Align::right, Align::right,
                     Align::right, Align::right, Align::right});
    for (std::size_t i = 0; i < shown; ++i) {
        const NameDiff& row = diff.rows[i];
        const std::int64_t delta = std::llround(row.delta_ns());
        table.add_row({clipped(row.name), std::string(to_string(row.kind)),
                       row.added()     ? "added"
                       : row.removed() ? "removed"
                                       : "changed",
                       format_fixed(row.count_a, 2), format_fixed(row.count_b, 2),
                       format_duration(std::llround(row.total_ns_a)),
                       format_duration(std::llround(row.total_ns_b)),
                       (delta > 0   ? "+"
                        : delta < 0 ? "−"
                                    : "") +
                           format_duration(std::llabs(delta))});
    }
    out += table.render("  ");
    return out;
}

}  // namespace fulcrum::cli
