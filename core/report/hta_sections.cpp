#include "core/report/hta_sections.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "core/report/report_html.h"
#include "core/util/text_table.h"

namespace fulcrum::report {
namespace {

using namespace analysis;

// The markup of the report's sortable tables (report_html.h), from rows built here.
void render_table(std::string& out, std::string_view name, const std::vector<std::string>& headers,
                  std::vector<std::vector<Cell>> rows) {
    Table table(std::string(name), headers);
    for (auto& row : rows) {
        table.add(std::move(row));
    }
    table.render(out);
}

void empty(std::string& out, std::string_view why) {
    out += "<p class=\"empty\">" + std::string(why) + "</p>\n";
}

void kernel_time_table(const KernelAnalysis& k, std::string& out) {
    // KernelTimeByType::ns by the bit set of types running at once, in the columns' order.
    constexpr int kMasks[] = {0b001, 0b010, 0b100, 0b011, 0b101, 0b110, 0b111};
    std::vector<std::vector<Cell>> rows;
    for (const KernelTimeByType& row : k.time_by_type) {
        std::vector<Cell> cells = {int_cell(row.rank), duration_cell(row.kernel_span_ns)};
        for (int mask : kMasks) {
            cells.push_back(percent_cell(row.ns[mask], row.kernel_span_ns));
        }
        cells.push_back(percent_cell(row.idle_ns, row.kernel_span_ns));
        rows.push_back(std::move(cells));
    }
    render_table(out, "kernel_time",
                 {"rank", "span", "computation", "communication", "memory", "comp+comm", "comp+mem",
                  "comm+mem", "all three", "idle"},
                 rows);
}

void top_kernels_table(const KernelAnalysis& k, std::string& out) {
    std::vector<std::vector<Cell>> rows;
    for (const KernelStats& s : k.top_kernels) {
        rows.push_back({text_cell(s.name), text_cell(to_string(s.type)), int_cell(s.count),
                        duration_cell(s.total_ns), duration_cell(std::llround(s.mean_ns())),
                        duration_cell(s.min_ns), duration_cell(s.max_ns), int_cell(s.ranks),
                        duration_cell(s.rank_total_min_ns), duration_cell(s.rank_total_max_ns),
                        int_cell(s.slowest_rank)});
    }
    render_table(out, "top_kernels",
                 {"kernel", "type", "count", "total", "mean", "min", "max", "ranks",
                  "rank total min", "rank total max", "slowest rank"},
                 rows);
}

void section_kernels(const RunAnalysis& a, int index, std::string& out) {
    out += heading(index, "kernels", "Kernels");
    if (!a.has_device_activity) {
        empty(
            out,
            "No device activity (kernels, copies, memsets) in this run: kernel answers need a GPU "
            "capture or an imported GPU trace.");
        return;
    }
    out +=
        "<p class=\"caption\">Per rank, the span from its first kernel to its last, by which types "
        "of kernel "
        "ran at once (HTA's kernel breakdown); the top kernels by total time over all ranks.</p>\n";
    kernel_time_table(a.kernels, out);
    top_kernels_table(a.kernels, out);
}

void section_idle(const RunAnalysis& a, int index, std::string& out) {
    if (!a.has_device_activity) {
        return;  // the Kernels section said why
    }
    out += heading(index, "idle", "Idle time by cause and kernel launches");
    out +=
        "<p class=\"caption\">Gaps before each kernel of a stream: host wait when its launch call "
        "began after "
        "the previous kernel ended, kernel wait when shorter than 30 µs, else other. Launch delay: "
        "kernel "
        "start − end of its call.</p>\n";
    std::vector<std::vector<Cell>> idle;
    for (const StreamIdle& s : a.kernels.idle) {
        idle.push_back({int_cell(s.rank), text_cell(s.lane), int_cell(s.kernels),
                        duration_cell(s.idle_ns()), duration_cell(s.host_wait_ns),
                        duration_cell(s.kernel_wait_ns), duration_cell(s.other_ns),
                        fixed_cell(s.mean_queue_length, 2), int_cell(s.max_queue_length)});
    }
    render_table(out, "idle",
                 {"rank", "stream", "kernels", "idle", "host wait", "kernel wait", "other",
                  "queue mean", "queue max"},
                 idle);
    std::vector<std::vector<Cell>> launches;
    for (const LaunchStats& s : a.kernels.launches) {
        launches.push_back(
            {int_cell(s.rank), int_cell(s.launches), duration_cell(s.cpu_total_ns / s.launches),
             duration_cell(s.gpu_total_ns / s.launches),
             duration_cell(std::llround(s.mean_delay_ns())), duration_cell(s.delay_max_ns),
             int_cell(s.short_kernels), int_cell(s.slow_calls), int_cell(s.delay_outliers)});
    }
    if (!launches.empty()) {
        render_table(out, "launches",
                     {"rank", "launches", "call (mean)", "kernel (mean)", "delay (mean)",
                      "delay (max)", "short kernels", "calls > 50 µs", "delays > 100 µs"},
                     launches);
    }
}

std::string rank_list(const std::vector<std::int32_t>& ranks) {
    std::string text;
    for (std::int32_t rank : ranks) {
        text += (text.empty() ? "" : ", ") + std::to_string(rank);
    }
    return text;
}

void section_communication(const RunAnalysis& a, int index, std::string& out) {
    out += heading(index, "communication", "Communication by collective");
    if (a.communication.empty()) {
        empty(out, "No collective was matched across two ranks or more.");
        return;
    }
    out +=
        "<p class=\"caption\">Per collective name and group of ranks: transfer is the last "
        "arrival's time "
        "(it waited for nobody), wait the others' wait for it; algbw = bytes / transfer, busbw as "
        "NCCL-tests "
        "defines it (× 2(n−1)/n all-reduce, × (n−1)/n all-gather, reduce-scatter, "
        "all-to-all).</p>\n";
    // A name with many groups alike (a 4D run's TP groups, one per DP × PP × CP coordinate):
    // its groups together first, then every group, the furthest below its name's busbw first.
    constexpr std::size_t kGroupsListedPlain = 16;  // as `fulcrum analyze --top`'s default
    const CollectiveListing listing = list_collectives(a.communication, kGroupsListedPlain);
    const bool folded = listing.folded;
    if (folded) {
        std::vector<std::vector<Cell>> rows;
        for (const CollectiveTotal& c : listing.totals) {
            const bool measured = c.bytes > 0 && c.transfer_ns > 0;
            rows.push_back({text_cell(c.name), text_cell(to_string(c.kind)), int_cell(c.groups),
                            int_cell(c.group_size), int_cell(c.calls),
                            c.bytes > 0 ? int_cell(c.bytes) : Cell{kUnknownFigure, ""},
                            duration_cell(c.transfer_ns), duration_cell(c.wait_ns),
                            measured ? fixed_cell(c.algbw_gb_s, 2) : Cell{kUnknownFigure, ""},
                            measured ? fixed_cell(c.busbw_gb_s, 2) : Cell{kUnknownFigure, ""},
                            c.slowest_busbw_gb_s > 0 ? fixed_cell(c.slowest_busbw_gb_s, 2)
                                                     : Cell{kUnknownFigure, ""}});
        }
        render_table(out, "communication_totals",
                     {"collective", "kind", "groups", "ranks a group", "calls", "bytes", "transfer",
                      "wait", "algbw GB/s", "busbw GB/s", "slowest group busbw"},
                     rows);
    }
    std::vector<std::vector<Cell>> rows;
    for (const SlowGroup& group : listing.groups) {
        const CollectiveSummary& c = group.group;
        const bool measured = c.bytes > 0 && c.transfer_ns > 0;
        rows.push_back({text_cell(c.name), text_cell(to_string(c.kind)),
                        text_cell(rank_list(c.ranks)), int_cell(c.calls),
                        c.bytes > 0 ? int_cell(c.bytes) : Cell{kUnknownFigure, ""},
                        duration_cell(c.transfer_ns), duration_cell(c.wait_ns),
                        measured ? fixed_cell(c.algbw_gb_s, 2) : Cell{kUnknownFigure, ""},
                        measured ? fixed_cell(c.busbw_gb_s, 2) : Cell{kUnknownFigure, ""}});
        if (folded) {
            rows.back().push_back(group.vs_name > 0 ? fixed_cell(group.vs_name, 2)
                                                    : Cell{kUnknownFigure, ""});
        }
    }
    std::vector<std::string> header = {"collective", "kind", "ranks",      "calls",     "bytes",
                                       "transfer",   "wait", "algbw GB/s", "busbw GB/s"};
    if (folded) {
        header.push_back("busbw vs its name");
    }
    render_table(out, "communication", header, rows);
}

template <typename Key>
std::string shares_text(const std::map<Key, std::int64_t>& shares, std::int64_t whole,
                        std::string_view label) {
    std::vector<std::pair<Key, std::int64_t>> order(shares.begin(), shares.end());
    std::stable_sort(order.begin(), order.end(),
                     [](const auto& x, const auto& y) { return x.second > y.second; });
    std::string text;
    for (std::size_t i = 0; i < std::min<std::size_t>(order.size(), 4); ++i) {
        std::string key;
        if constexpr (std::is_same_v<Key, std::string>) {
            key = order[i].first;
        } else {
            key = std::string(label) + " " + std::to_string(order[i].first);
        }
        text += (text.empty() ? "" : ", ") + key + " " + percent_cell(order[i].second, whole).html;
    }
    return text.empty() ? kUnknownFigure : text;
}

void section_critical_path(const RunAnalysis& a, int index, std::string& out) {
    out += heading(index, "critical-path", "Critical path");
    if (a.critical_paths.empty()) {
        empty(out, "No forward/backward passes: the critical path needs the fulcrum annotations.");
        return;
    }
    out +=
        "<p class=\"caption\">Per step, the chain of passes, pipeline transfers and collectives "
        "that set its "
        "length, and the largest shares of it. What-if: the step's pipeline replayed with one "
        "critical pass at "
        "its stage and phase's mean.</p>\n";
    std::vector<std::vector<Cell>> steps, what_ifs;
    for (const CriticalPath& path : a.critical_paths) {
        const std::int64_t length = path.end_ns - path.start_ns;
        steps.push_back({int_cell(path.step), duration_cell(length),
                         int_cell(std::int64_t(path.segments.size())),
                         text_cell(shares_text(path.by_what, length, "")),
                         text_cell(shares_text(path.by_rank, length, "rank")),
                         text_cell(shares_text(path.by_stage, length, "stage"))});
        for (std::size_t i = 0; i < std::min<std::size_t>(path.what_if.size(), 3); ++i) {
            const WhatIf& w = path.what_if[i];
            what_ifs.push_back({int_cell(path.step), int_cell(w.rank), int_cell(w.stage),
                                int_cell(w.microbatch), text_cell(to_string(w.phase)),
                                duration_cell(w.busy_ns), duration_cell(w.typical_ns),
                                duration_cell(w.step_saving_ns)});
        }
    }
    render_table(out, "critical_path",
                 {"step", "length", "segments", "by kind", "by rank", "by stage"}, steps);
    if (!what_ifs.empty()) {
        render_table(
            out, "what_if",
            {"step", "rank", "stage", "micro-batch", "phase", "busy", "stage mean", "step saving"},
            what_ifs);
    }
}

}  // namespace

void hta_sections(const RunAnalysis& analysis, int index, std::string& out) {
    section_kernels(analysis, index, out);
    section_idle(analysis, index, out);
    section_communication(analysis, index, out);
    section_critical_path(analysis, index, out);
}

void diff_section(const RunDiff& diff, std::string_view first_run, int index, std::string& out) {
    out += heading(index, "diff", "Operators and kernels against " + html_escape(first_run));
    if (diff.rows.empty()) {
        empty(out, "Neither run has ranges or kernels to compare.");
        return;
    }
    out += "<p class=\"caption\">Per step (this run over " + std::to_string(diff.steps_b) +
           ", the first over " + std::to_string(diff.steps_a) +
           "): count and total time of each range and kernel name, the largest changes in time "
           "first (at most "
           "50).</p>\n";
    std::vector<std::vector<Cell>> rows;
    for (std::size_t i = 0; i < std::min<std::size_t>(diff.rows.size(), 50); ++i) {
        const NameDiff& row = diff.rows[i];
        rows.push_back({text_cell(row.name),
                        text_cell(to_string(row.kind)),
                        text_cell(row.added()     ? "added"
                                  : row.removed() ? "removed"
                                                  : "changed"),
                        fixed_cell(row.count_a, 2),
                        fixed_cell(row.count_b, 2),
                        duration_cell(std::llround(row.total_ns_a)),
                        duration_cell(std::llround(row.total_ns_b)),
                        {(row.delta_ns() > 0 ? "+" : "") +
                             html_escape(format_duration(std::llround(row.delta_ns()))),
                         format_fixed(row.delta_ns(), 0)}});
    }
    render_table(
        out, "diff",
        {"name", "kind", "change", "count (first)", "count", "time (first)", "time", "Δ time"},
        rows);
}

}  // namespace fulcrum::report
