#include "core/report/html_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "core/report/hot_switch_section.h"
#include "core/report/hta_sections.h"
#include "core/report/plan_section.h"
#include "core/report/report_html.h"
#include "core/store/trace_reader.h"
#include "core/util/text_table.h"

namespace fulcrum::report {

using analysis::Matrix;
using analysis::RunAnalysis;

ReportRun make_report_run(std::string path, const analysis::RunTrace& trace,
                          analysis::RunAnalysis analysis, std::vector<ImportLogEntry> import_log,
                          const TrainedTokens* tokens) {
    ReportRun run;
    run.path = std::move(path);
    run.throughput = run_throughput(trace, analysis, tokens);
    run.analysis = std::move(analysis);
    for (const auto& rank : trace.ranks) {
        run.ranks.push_back(rank.info);
    }
    run.import_log = std::move(import_log);
    return run;
}

Result<ReportRun> load_report_run(const std::string& path, const LoadReportOptions& options) {
    auto reader = store::TraceReader::open(path);
    if (!reader) {
        return reader.error();
    }
    auto log = reader->import_log();
    if (!log) {
        return log.error();
    }
    analysis::AnalyzeOptions analyze;
    if (options.progress) {
        analyze.progress = [&](std::string_view stage, double fraction) {
            options.progress("analysing: " + std::string(stage), fraction);
        };
    }
    analyze.cancel = options.cancel;
    // A comparison diffs its runs by name: the tally is taken as the ranks are read, so each
    // run is read once, a rank at a time, never whole (analyze_run_file).
    analyze.tally_names = options.diff_against != nullptr || options.keep_tally != nullptr;
    // The throughput's tokens are tallied as the analysis scans the workload table: its rows
    // are neither read again nor held (ten million at 1 B events).
    TrainedTokens tokens(reader->ranks());
    analyze.read_workload = false;
    analyze.visit_workload = [&tokens](const WorkloadEntry& row) { tokens.add(row); };
    analysis::RunTrace metadata;
    auto result = analysis::analyze_run_file(*reader, metadata, analyze);
    if (!result) {
        return result.error();
    }
    std::optional<analysis::NameTally> tally = std::move(result->names);
    result->names.reset();
    ReportRun run = make_report_run(path, metadata, std::move(*result), std::move(*log), &tokens);
    // The reader's rank table is the recording's own account (complete, dropped records).
    run.ranks = reader->ranks();
    if (!tally) {
        return run;
    }
    if (options.diff_against != nullptr) {
        run.diff = analysis::diff_tallies(
            {&options.diff_against->tally, &options.diff_against->names}, {&*tally, &metadata});
    }
    if (options.keep_tally != nullptr) {
        options.keep_tally->emplace(DiffBase{std::move(metadata), std::move(*tally)});
    }
    return run;
}

namespace {

// ---------------------------------------------------------------------------------------
// Aggregates of the analyses, the same as `fulcrum analyze` prints.

using analysis::BreakdownTotal;
using analysis::StepKey;

std::string step_label(const StepKey& key) {
    if (key.whole_trace) {
        return "whole trace";
    }
    return key.step ? "step " + std::to_string(*key.step) : std::string("step ") + kUnknownFigure;
}

Cell step_cell(const StepKey& key) {
    if (key.whole_trace) {
        return {"whole trace", ""};
    }
    return key.step ? int_cell(*key.step) : Cell{kUnknownFigure, ""};
}

std::map<StepKey, BreakdownTotal> breakdown_by_step(const RunAnalysis& a) {
    return analysis::breakdown_by_step(a.breakdown);
}

// Mean over the matrix's columns of the largest finite value of each column: the busiest
// rank's compute per step, the step's compute critical path.
double mean_column_max(const Matrix& m) {
    double sum = 0;
    int n = 0;
    for (std::size_t c = 0; c < m.columns.size(); ++c) {
        double best = -INFINITY;
        for (std::size_t r = 0; r < m.rows.size(); ++r) {
            if (std::isfinite(m.at(r, c))) {
                best = std::max(best, m.at(r, c));
            }
        }
        if (std::isfinite(best)) {
            sum += best;
            ++n;
        }
    }
    return n > 0 ? sum / n : std::nan("");
}

// Mean |predicted − measured| / measured over the cells both matrices have.
double mean_relative_error(const Matrix& measured, const Matrix& predicted) {
    if (measured.rows != predicted.rows || measured.columns != predicted.columns) {
        return std::nan("");
    }
    double sum = 0;
    int n = 0;
    for (std::size_t i = 0; i < measured.values.size(); ++i) {
        const double m = measured.values[i], p = predicted.values[i];
        if (std::isfinite(m) && std::isfinite(p) && m > 0) {
            sum += std::abs(p - m) / m;
            ++n;
        }
    }
    return n > 0 ? sum / n : std::nan("");
}

// "layers 4, hidden 256, …" from what run.config gave; "unknown" when it gave none.
std::string model_text(const RunConfig& c) {
    if (!c.has_model()) {
        return "unknown";
    }
    const auto part = [](const char* name, int value) {
        return std::string(name) + " " + (value > 0 ? std::to_string(value) : kUnknownFigure);
    };
    const parallel::ModelShape& m = c.model;
    return part("layers", m.layers) + ", " + part("hidden", m.hidden) + ", " +
           part("heads", m.heads) + ", " + part("context", m.context) + ", " +
           part("vocab", m.vocab);
}

std::string data_text(const RunConfig& c) {
    if (!c.lengths.empty()) {
        return c.lengths + ", " + std::to_string(c.documents) + " documents, seed " +
               std::to_string(c.seed);
    }
    return c.data.empty() ? "unknown" : c.data;
}

// How merge put a rank on the run's clock. The recorded shift (RankInfo::clock_shift_ns) also
// moves the run's zero to its first event, so it is mostly the UTC offset; what the alignment
// changed is the shift against the rank's own UTC offset, as `fulcrum merge` prints it. Ranks
// aligned by UTC offset have no such correction: their hosts' clocks are taken as they are.
std::string clock_alignment_text(const RankInfo& r) {
    switch (r.alignment) {
        case ClockAlignment::barrier_marks:
            return "barrier marks";
        case ClockAlignment::utc_offset:
            return "UTC offset (host clock)";
        case ClockAlignment::none:
            break;
    }
    return "not merged";
}

Cell clock_correction_cell(const RankInfo& r, std::int64_t run_start_utc_ns) {
    if (r.alignment != ClockAlignment::barrier_marks) {
        return {r.alignment == ClockAlignment::utc_offset ? "— (aligned by UTC offset)"
                                                          : kUnknownFigure,
                ""};
    }
    return duration_cell(double(r.clock_shift_ns + run_start_utc_ns - r.utc_offset_ns));
}

std::string run_label(const ReportRun& run, std::size_t index) {
    const std::string& name = run.analysis.run.name;
    return name.empty() ? "run " + std::to_string(index + 1) : name;
}

// ---------------------------------------------------------------------------------------
// Sections

void section_config(const ReportRun& run, int index, std::string& out) {
    const RunAnalysis& a = run.analysis;
    const auto& c = a.config;
    out += heading(index, "config", "Configuration and 4D grid") + "<table class=\"kv\">";
    auto row = [&](std::string_view key, const std::string& value) {
        out += "<tr><th>" + std::string(key) + "</th><td>" + html_escape(value) + "</td></tr>";
    };
    if (!run.path.empty()) {
        row("file", run.path);
    }
    row("run", a.run.name + " (" + std::string(to_string(a.run.origin)) + ")");
    row("command", text_or_unknown(a.run.command));
    row("producer", text_or_unknown(a.run.producer));
    if (a.run.start_utc_ns != 0) {
        row("started (UTC)", format_utc(a.run.start_utc_ns));
    }
    row("grid", describe_grid(c) + (c.grid_known ? " = " : "; ") +
                    std::to_string(run.ranks.size()) + " ranks");
    row("schedule", text_or_unknown(schedule_text(c)));
    row("balancer",
        text_or_unknown(c.balancer) +
            (c.balancer == "ilp" ? " (window " + std::to_string(c.ilp_window) + ")" : ""));
    row("CP sharding", text_or_unknown(c.cp_shard));
    row("micro-batches", c.layout.microbatches > 0
                             ? std::to_string(c.layout.microbatches) + " per replica and step"
                             : kUnknownFigure);
    row("model", model_text(c));
    row("data", data_text(c));
    row("steps", c.steps > 0 ? std::to_string(c.steps) : kUnknownFigure);
    row("backend", text_or_unknown(c.backend));
    row("events", std::to_string(a.events) + " (" + std::to_string(a.passes) + " passes)");
    out += "</table>\n<details><summary>run.config as recorded</summary><pre>" +
           html_escape(a.run.config_json) + "</pre></details>\n";

    // The grid: one cell per rank, pipeline stage across, the (dp, cp, tp) groups down.
    std::set<std::tuple<int, int, int>> groups;
    int stages = 1;
    for (const auto& r : run.ranks) {
        groups.insert({r.dp, r.cp, r.tp});
        stages = std::max(stages, r.pp + 1);
    }
    std::vector<std::tuple<int, int, int>> group_list(groups.begin(), groups.end());
    // Laid out by coordinates only when every rank has them; else a plain square of ranks.
    const bool all_placed = std::all_of(run.ranks.begin(), run.ranks.end(), [](const RankInfo& r) {
        return r.dp >= 0 && r.pp >= 0 && r.cp >= 0 && r.tp >= 0;
    });
    const bool laid_out =
        all_placed && group_list.size() * static_cast<std::size_t>(stages) >= run.ranks.size();
    const std::size_t columns =
        laid_out ? static_cast<std::size_t>(stages)
                 : std::max<std::size_t>(
                       1, static_cast<std::size_t>(std::ceil(std::sqrt(double(run.ranks.size())))));
    const std::size_t rows =
        laid_out ? group_list.size() : (run.ranks.size() + columns - 1) / columns;
    const double cell_w = std::clamp(640.0 / double(std::max<std::size_t>(columns, 1)), 8.0, 96.0);
    const double cell_h = std::clamp(480.0 / double(std::max<std::size_t>(rows, 1)), 4.0, 24.0);
    const double width = kMarginLeft + kMarginRight + cell_w * double(columns);
    const double height = kMarginTop + cell_h * double(rows) + kMarginBottom;
    out +=
        "<p class=\"caption\">Ranks by pipeline stage (across) and (dp, cp, tp) group (down); "
        "green: recorded completely, orange: records dropped, red: recording stopped early.</p>";
    open_chart(out, "grid", index, std::max(width, 360.0), height, "4D grid");
    for (std::size_t i = 0; i < run.ranks.size(); ++i) {
        const RankInfo& r = run.ranks[i];
        std::size_t col = i % columns, row_index = i / columns;
        if (laid_out) {
            col = static_cast<std::size_t>(std::max(r.pp, 0));
            row_index =
                static_cast<std::size_t>(std::lower_bound(group_list.begin(), group_list.end(),
                                                          std::tuple{r.dp, r.cp, r.tp}) -
                                         group_list.begin());
        }
        const std::string fill = !r.complete             ? "#e15759"
                                 : r.dropped_records > 0 ? "#f28e2b"
                                                         : "#59a14f";
        const std::string tip =
            "rank " + std::to_string(r.rank) + " · dp " + coordinate_text(r.dp) + " pp " +
            coordinate_text(r.pp) + " cp " + coordinate_text(r.cp) + " tp " +
            coordinate_text(r.tp) + " · host " + text_or_unknown(r.host) + " pid " +
            std::to_string(r.pid) +
            (r.device >= 0 ? " · device " + std::to_string(r.device) : " · CPU") +
            (r.complete ? "" : " · incomplete") +
            (r.dropped_records > 0 ? " · " + std::to_string(r.dropped_records) + " dropped" : "");
        const double x = kMarginLeft + cell_w * double(col),
                     y = kMarginTop + cell_h * double(row_index);
        rect_mark(out, x + 1, y + 1, cell_w - 2, cell_h - 2, fill, tip);
        if (cell_h >= 14 && cell_w >= 24) {
            svg_text(out, x + cell_w / 2, y + cell_h / 2 + 4, std::to_string(r.rank), "middle",
                     " class=\"onmark\"");
        }
    }
    if (laid_out) {
        for (std::size_t g = 0; g < group_list.size() && cell_h >= 10; ++g) {
            const auto& [dp, cp, tp] = group_list[g];
            svg_text(
                out, kMarginLeft - 4, kMarginTop + cell_h * (double(g) + 0.5) + 4,
                "dp" + std::to_string(dp) + " tp" + std::to_string(tp) + " cp" + std::to_string(cp),
                "end");
        }
        for (int s = 0; s < stages && cell_w >= 24; ++s) {
            svg_text(out, kMarginLeft + cell_w * (s + 0.5), kMarginTop + cell_h * double(rows) + 14,
                     "stage " + std::to_string(s));
        }
    }
    close_chart(out);
    Table ranks("ranks", {"rank", "host", "pid", "device", "dp", "pp", "cp", "tp", "complete",
                          "dropped records", "clock alignment", "clock correction"});
    for (const auto& r : run.ranks) {
        ranks.add({int_cell(r.rank), text_cell(text_or_unknown(r.host)), int_cell(r.pid),
                   r.device >= 0 ? int_cell(r.device) : Cell{"CPU", "-1"}, coordinate_cell(r.dp),
                   coordinate_cell(r.pp), coordinate_cell(r.cp), coordinate_cell(r.tp),
                   text_cell(r.complete ? "yes" : "no"), int_cell(r.dropped_records),
                   text_cell(clock_alignment_text(r)),
                   clock_correction_cell(r, a.run.start_utc_ns)});
    }
    out += "<details><summary>ranks (" + std::to_string(run.ranks.size()) + ")</summary>";
    ranks.render(out);
    out += "</details>\n";
}

void section_breakdown(const ReportRun& run, int index, std::string& out) {
    const RunAnalysis& a = run.analysis;
    out += heading(index, "breakdown", "Step breakdown") + "\n";
    if (a.breakdown.empty()) {
        out += "<p class=\"empty\">No events that span time: nothing to break down.</p>\n";
        return;
    }
    const auto by_step = breakdown_by_step(a);
    out +=
        "<p class=\"caption\">Mean over ranks of each step's wall time: compute + exposed "
        "communication + other + idle = wall (overlapped communication is hidden inside "
        "compute).</p>";
    const Buckets buckets(by_step.size(), 256);
    BarSeries bars;
    bars.series = {"compute", "exposed communication", "other", "idle"};
    std::vector<std::pair<StepKey, BreakdownTotal>> steps(by_step.begin(), by_step.end());
    if (steps.front().first.whole_trace || steps.back().first.whole_trace) {
        out +=
            "<p class=\"caption\">Ranks without step ranges are shown as one window over their "
            "whole trace (\"whole trace\"), with no step number.</p>";
    }
    for (std::size_t b = 0; b < buckets.count; ++b) {
        BreakdownTotal sum;
        const std::size_t first = b * buckets.size,
                          last = std::min(first + buckets.size, steps.size()) - 1;
        for (std::size_t i = first; i <= last; ++i) {
            sum.add(steps[i].second);
        }
        const StepKey& from = steps[first].first;
        const StepKey& to = steps[last].first;
        bars.categories.push_back(from.step && to.step && !from.whole_trace && !to.whole_trace
                                      ? span_label("step", *from.step, *to.step)
                                  : first == last ? step_label(from)
                                                  : step_label(from) + "–" + step_label(to));
        bars.values.push_back({sum.mean(sum.compute_ns), sum.mean(sum.exposed_ns),
                               sum.mean(sum.other_ns), sum.mean(sum.idle_ns)});
    }
    bar_chart(out, "breakdown", index, "step breakdown", bars,
              [](double v) { return duration_text(v); });
    Table table("breakdown", {"step", "ranks", "wall (mean)", "slowest rank", "compute",
                              "comm overlapped", "comm exposed", "other", "idle"});
    for (const auto& [step, s] : steps) {
        table.add({step_cell(step), int_cell(s.ranks), duration_cell(s.mean(s.wall_ns)),
                   duration_cell(double(s.max_wall_ns)),
                   percent_cell(double(s.compute_ns), double(s.wall_ns)),
                   percent_cell(double(s.overlapped_ns), double(s.wall_ns)),
                   percent_cell(double(s.exposed_ns), double(s.wall_ns)),
                   percent_cell(double(s.other_ns), double(s.wall_ns)),
                   percent_cell(double(s.idle_ns), double(s.wall_ns))});
    }
    table.render(out);
    // Per rank, mean over steps: where a slow rank stands out.
    std::map<std::int32_t, BreakdownTotal> by_rank;
    for (const auto& row : a.breakdown) {
        by_rank[row.rank].add(row);
    }
    Table ranks("breakdown_ranks", {"rank", "steps", "wall (mean)", "compute", "comm overlapped",
                                    "comm exposed", "other", "idle"});
    std::size_t shown = 0;
    for (const auto& [rank, s] : by_rank) {
        if (++shown > 1024) {
            break;
        }
        ranks.add({int_cell(rank), int_cell(s.ranks), duration_cell(s.mean(s.wall_ns)),
                   duration_cell(s.mean(s.compute_ns)), duration_cell(s.mean(s.overlapped_ns)),
                   duration_cell(s.mean(s.exposed_ns)), duration_cell(s.mean(s.other_ns)),
                   duration_cell(s.mean(s.idle_ns))});
    }
    out += "<details><summary>per rank, mean over steps" +
           std::string(by_rank.size() > 1024
                           ? " (the first 1024 of " + std::to_string(by_rank.size()) + " ranks)"
                           : "") +
           "</summary>";
    ranks.render(out);
    out += "</details>\n";
}

void section_bubbles(const ReportRun& run, int index, std::string& out) {
    const RunAnalysis& a = run.analysis;
    const auto& b = a.bubbles;
    out += heading(index, "bubbles", "Pipeline bubbles") + "\n";
    if (b.stages.empty()) {
        const std::string why =
            !a.config.grid_known
                ? "No pipeline: the grid is unknown (the ranks have no DP/TP/PP/CP coordinates)."
            : !a.config.hot_switch.empty()
                ? "Hot-switched: each length bucket ran its own pipeline shape, which the ranks' "
                  "coordinates do not describe; see Hot switching for each bucket's time."
            : a.config.layout.grid.pp <= 1
                ? "No pipeline (pp = 1)."
                : "No passes with a step and a stage to measure the pipeline by.";
        out += "<p class=\"empty\">" + why + "</p>\n";
        return;
    }
    out += "<p>Schedule " + html_escape(b.schedule) +
           (b.schedule_assumed ? " (assumed: the run does not say its schedule)" : "") +
           "; bubble as a fraction of busy time: theory " + theory_formula(b) + " = " +
           format_figure(b.theory_fraction, 3) + ", measured " +
           format_figure(b.mean_measured_fraction, 3) + " (mean over pipelines and steps).</p>\n";
    const auto by_stage = analysis::bubble_by_stage(b);
    BarSeries bars;
    bars.series = {"warm-up/cool-down", "unequal micro-batches", "other"};
    for (const auto& [stage, s] : by_stage) {
        bars.categories.push_back("stage " + std::to_string(stage));
        bars.values.push_back(
            {s.mean(s.warmup_cooldown_ns), s.mean(s.unequal_microbatch_ns), s.mean(s.other_ns)});
    }
    out +=
        "<p class=\"caption\">Each stage's bubble per step (mean over steps and pipelines), by "
        "cause.</p>";
    bar_chart(out, "bubbles", index, "pipeline bubbles by stage and cause", bars,
              [](double v) { return duration_text(v); });
    Table table("bubbles", {"stage", "busy", "bubble", "fraction", "warm-up/cool-down",
                            "unequal mbs", "other", "wait prev", "wait next"});
    for (const auto& [stage, s] : by_stage) {
        table.add({int_cell(stage), duration_cell(s.mean(s.busy_ns)),
                   duration_cell(s.mean(s.bubble_ns)),
                   fixed_cell(s.fraction().value_or(std::nan("")), 3),
                   percent_cell(double(s.warmup_cooldown_ns), double(s.bubble_ns)),
                   percent_cell(double(s.unequal_microbatch_ns), double(s.bubble_ns)),
                   percent_cell(double(s.other_ns), double(s.bubble_ns)),
                   duration_cell(s.mean(s.wait_on_previous_ns)),
                   duration_cell(s.mean(s.wait_on_next_ns))});
    }
    table.render(out);
    // Per step: measured against replayed and theory, mean over the step's pipelines that
    // have each figure.
    struct StepFractions {
        int pipelines = 0;
        double measured = 0, replay = 0;
        int measured_count = 0, replay_count = 0;
    };
    std::map<std::int32_t, StepFractions> by_step;
    for (const auto& p : b.pipelines) {
        StepFractions& f = by_step[p.step];
        ++f.pipelines;
        if (p.measured_fraction) {
            f.measured += *p.measured_fraction;
            ++f.measured_count;
        }
        if (p.replay_fraction) {
            f.replay += *p.replay_fraction;
            ++f.replay_count;
        }
    }
    const auto mean = [](double sum, int n) { return n > 0 ? sum / n : std::nan(""); };
    Table steps("bubble_steps", {"step", "pipelines", "measured fraction", "replay fraction",
                                 "theory " + std::string(theory_formula(b))});
    for (const auto& [step, f] : by_step) {
        steps.add({int_cell(step), int_cell(f.pipelines),
                   fixed_cell(mean(f.measured, f.measured_count), 3),
                   fixed_cell(mean(f.replay, f.replay_count), 3),
                   figure_cell(b.theory_fraction, 3)});
    }
    out += "<details><summary>per step</summary>";
    steps.render(out);
    out += "</details>\n";
}

void section_cp_load(const ReportRun& run, int index, std::string& out) {
    const auto& cp = run.analysis.cp_load;
    out += heading(index, "cp-load", "CP attention load") + "\n";
    if (cp.groups.empty()) {
        const std::string why =
            !cp.cp
                ? "No CP groups: the grid is unknown (the ranks have no DP/TP/PP/CP coordinates)."
            : *cp.cp <= 1 ? "No context parallelism (cp = 1)."
                          : "No CP group with passes or held work.";
        out += "<p class=\"empty\">" + why + "</p>\n";
        return;
    }
    out += "<p>" + std::to_string(cp.groups.size()) +
           " CP groups (step × micro-batch × group), sharding " +
           html_escape(text_or_unknown(cp.sharding)) + "; imbalance max/mean: measured " +
           format_figure(cp.mean_measured_imbalance, 3) + ", predicted " +
           format_figure(cp.mean_predicted_imbalance, 3) + ".</p>\n";
    // Sums over the groups where the rank has the figure (a pass; a workload row).
    struct RankSums {
        double attention = 0, pairs = 0;
        int attention_count = 0, pairs_count = 0;
    };
    std::map<int, RankSums> by_cp_rank;
    double total_attention = 0, total_pairs = 0;
    for (const auto& group : cp.groups) {
        for (const auto& r : group.ranks) {
            RankSums& sums = by_cp_rank[r.cp_rank];
            if (r.attention_ns) {
                sums.attention += double(*r.attention_ns);
                ++sums.attention_count;
                total_attention += double(*r.attention_ns);
            }
            if (r.pairs) {
                sums.pairs += double(*r.pairs);
                ++sums.pairs_count;
                total_pairs += double(*r.pairs);
            }
        }
    }
    // Shares, so measured time and predicted pairs sit on one axis: 1/cp each when balanced.
    BarSeries bars;
    bars.stacked = false;
    bars.series = {"measured attention share", "predicted pairs share"};
    for (const auto& [cp_rank, v] : by_cp_rank) {
        bars.categories.push_back("cp rank " + std::to_string(cp_rank));
        bars.values.push_back({total_attention > 0 ? v.attention / total_attention : std::nan(""),
                               total_pairs > 0 ? v.pairs / total_pairs : std::nan("")});
    }
    out +=
        "<p class=\"caption\">Each CP rank's share of the attention time (measured) and of the "
        "causal pairs (predicted), over all groups; 1/cp each when balanced.</p>";
    bar_chart(out, "cp_load", index, "CP attention load", bars,
              [](double v) { return format_fixed(v * 100, 1) + "%"; });
    Table ranks("cp_ranks", {"cp rank", "attention (mean)", "pairs (mean)"});
    for (const auto& [cp_rank, v] : by_cp_rank) {
        ranks.add(
            {int_cell(cp_rank),
             duration_cell(v.attention_count > 0 ? v.attention / v.attention_count : std::nan("")),
             fixed_cell(v.pairs_count > 0 ? v.pairs / v.pairs_count : std::nan(""), 0)});
    }
    ranks.render(out);
    if (!cp.mean_predicted_by_sharding.empty()) {
        // Under Ulysses attention is even whatever the sharding: the alternatives are what the
        // same documents would give under all-gather CP.
        const bool ulysses =
            run.analysis.config.layout.context_parallelism == parallel::ContextParallelism::ulysses;
        Table shardings(
            "cp_shardings",
            {ulysses ? "sharding (under all-gather CP; Ulysses splits the heads)" : "sharding",
             "predicted imbalance (max/mean pairs)"});
        for (const auto& [name, value] : cp.mean_predicted_by_sharding) {
            shardings.add(
                {text_cell(name + (name == cp.sharding ? " (used)" : "")), fixed_cell(value, 3)});
        }
        shardings.render(out);
    }
}

void section_offload(const ReportRun& run, int index, std::string& out) {
    const auto& o = run.analysis.offload;
    out += heading(index, "offload", "Offload overlap") + "\n";
    const std::string pageable =
        o.pageable_copies > 0
            ? " " + std::to_string(o.pageable_copies) + " copies of pageable host memory (" +
                  html_escape(duration_text(double(o.pageable_copy_ns))) +
                  ": data loads, read-backs, staging) are synchronous and not counted as offload."
            : "";
    const std::string staging =
        o.staging_copies > 0
            ? " " + std::to_string(o.staging_copies) + " pinned staging copies (" +
                  html_escape(duration_text(double(o.staging_copy_ns))) +
                  ": uploads of ranks that send nothing out, read-backs under a page) are not "
                  "counted as offload either."
            : "";
    if (o.ranks.empty()) {
        out += "<p class=\"empty\">No offload copies recorded." + pageable + staging + "</p>\n";
        return;
    }
    out += "<p>Copies " + html_escape(duration_text(double(o.copy_ns))) + ", " +
           format_percent(double(o.overlapped_ns), double(o.copy_ns)) + " hidden behind compute, " +
           html_escape(duration_text(double(o.exposed_ns))) + " exposed, " +
           (o.bandwidth_gb_s ? format_fixed(*o.bandwidth_gb_s, 2) + " GB/s"
                             : std::string("bandwidth unknown")) +
           ". Smallest chunk that hides its copy: " + analysis::chunk_size_text(o) +
           (o.chunk_note.empty() ? "" : " (" + html_escape(o.chunk_note) + ")") + "." + pageable +
           staging + "</p>\n";
    BarSeries bars;
    bars.series = {"overlapped with compute", "exposed"};
    for (const auto& r : o.ranks) {
        bars.categories.push_back("rank " + std::to_string(r.rank));
        bars.values.push_back({double(r.overlapped_ns), double(r.exposed_ns)});
    }
    bar_chart(out, "offload", index, "offload overlap by rank", bars,
              [](double v) { return duration_text(v); });
    Table table("offload", {"rank", "copies", "copy time", "overlapped", "exposed", "host→device",
                            "device→host", "bytes", "GB/s"});
    for (const auto& r : o.ranks) {
        table.add({int_cell(r.rank), int_cell(r.copies), duration_cell(double(r.copy_ns)),
                   duration_cell(double(r.overlapped_ns)), duration_cell(double(r.exposed_ns)),
                   duration_cell(double(r.host_to_device_ns)),
                   duration_cell(double(r.device_to_host_ns)), int_cell(r.bytes),
                   figure_cell(r.bandwidth_gb_s, 2)});
    }
    table.render(out);
}

// Memory per rank (core/analysis/memory.h): each rank's measured peak against the memory
// model's prediction for its stage, and per stage the prediction's parts.
void section_memory(const ReportRun& run, int index, std::string& out) {
    const analysis::MemoryAnalysis& memory = run.analysis.memory;
    if (memory.ranks.empty()) {
        return;  // no fulcrum-train peak and no prediction: nothing to say
    }
    constexpr double kMiB = 1024.0 * 1024.0;
    out += heading(index, "memory", "Memory per rank") + "\n";
    out += "<p>Techniques: " + html_escape(memory.techniques) +
           ". Measured: the backend's counted allocations at their peak (fulcrum-train's "
           "<code>fulcrum.memory</code> mark); predicted: the memory model's count for this "
           "layout with full micro-batches (docs/plan.md, \"The engine's own count\")." +
           (memory.note.empty() ? "" : " " + html_escape(memory.note) + ".") + "</p>\n";
    auto mib = [&](const auto& bytes) {
        return bytes ? double(*bytes) / kMiB : std::numeric_limits<double>::quiet_NaN();
    };
    BarSeries bars;
    bars.series = {"measured", "predicted"};
    bars.stacked = false;
    for (const analysis::RankMemory& r : memory.ranks) {
        bars.categories.push_back("rank " + std::to_string(r.rank));
        bars.values.push_back({mib(r.peak_bytes), mib(r.predicted_bytes)});
    }
    bar_chart(out, "memory", index, "peak memory by rank (MiB)", bars,
              [](double v) { return format_fixed(v, 2) + " MiB"; });
    Table table("memory",
                {"stage", "ranks", "fullest rank", "peak MiB", "predicted MiB", "model state",
                 "workspace", "activations", "pinned MiB", "predicted pinned"});
    for (const analysis::StageMemoryRow& row : analysis::memory_by_stage(memory)) {
        const analysis::RankMemory& r = row.fullest;
        const bool predicted = r.predicted_bytes.has_value();
        auto part = [&](double bytes) {
            return predicted ? fixed_cell(bytes / kMiB, 2) : figure_cell(std::nullopt, 2);
        };
        auto optional_mib = [&](const auto& bytes) {
            return bytes ? fixed_cell(double(*bytes) / kMiB, 2) : figure_cell(std::nullopt, 2);
        };
        table.add({coordinate_cell(row.stage), int_cell(row.ranks), int_cell(r.rank),
                   optional_mib(r.peak_bytes), optional_mib(r.predicted_bytes),
                   part(r.model_state_bytes), part(r.workspace_bytes), part(r.activations_bytes),
                   optional_mib(r.peak_pinned_bytes), optional_mib(r.predicted_pinned_bytes)});
    }
    table.render(out);
}

void section_imbalance(const ReportRun& run, int index, const ReportOptions& options,
                       std::string& out) {
    const auto& im = run.analysis.imbalance;
    out += heading(index, "imbalance", "Imbalance") + "\n";
    if (im.compute_by_step.rows.empty()) {
        out += "<p class=\"empty\">No passes: nothing to compare across ranks.</p>\n";
    } else {
        out += "<p>Compute imbalance across ranks (max/mean per step; " +
               std::string(analysis::kImbalanceOverSteps) + "): measured " +
               format_figure(im.compute_imbalance, 3) + ", predicted " +
               format_figure(im.predicted_imbalance, 3) +
               (im.has_prediction
                    ? std::string(im.predicted_is_time ? " (cost model)" : " (causal pairs)")
                    : std::string(" (no predicted work)")) +
               ".</p>\n";
        const auto time = [](double v) { return duration_text(v); };
        const auto pairs = [](double v) { return format_fixed(v, 0) + " pairs"; };
        out += "<p class=\"caption\">Measured compute per rank and step.</p>";
        heatmap(out, "heatmap_compute", index, "measured compute per rank and step",
                im.compute_by_step, "step", options.max_heatmap_rows, options.max_heatmap_columns,
                time);
        if (im.has_prediction) {
            out += std::string("<p class=\"caption\">Predicted work per rank and step (") +
                   (im.predicted_is_time ? "cost model, time" : "causal pairs") + ").</p>";
            if (im.predicted_is_time) {
                heatmap(out, "heatmap_predicted", index, "predicted work per rank and step",
                        im.predicted_by_step, "step", options.max_heatmap_rows,
                        options.max_heatmap_columns, time);
            } else {
                heatmap(out, "heatmap_predicted", index, "predicted work per rank and step",
                        im.predicted_by_step, "step", options.max_heatmap_rows,
                        options.max_heatmap_columns, pairs);
            }
        }
        // The step whose ranks differ most, by micro-batch.
        const auto degree = im.compute_by_step.column_imbalance();
        std::size_t worst = 0;
        for (std::size_t c = 1; c < degree.size(); ++c) {
            if (std::isfinite(degree[c]) &&
                (!std::isfinite(degree[worst]) || degree[c] > degree[worst])) {
                worst = c;
            }
        }
        const std::int32_t worst_step =
            im.compute_by_step.columns.empty() ? -1 : im.compute_by_step.columns[worst];
        for (const auto& step : im.by_microbatch) {
            if (step.step == worst_step && !step.compute_ns.rows.empty()) {
                out +=
                    "<p class=\"caption\">Measured compute per rank and micro-batch in step " +
                    std::to_string(step.step) +
                    (!degree.empty() && std::isfinite(degree[worst])
                         ? ", the least balanced (max/mean " + format_fixed(degree[worst], 3) + ")"
                         : std::string()) +
                    ".</p>";
                heatmap(out, "heatmap_microbatch", index, "compute per rank and micro-batch",
                        step.compute_ns, "micro-batch", options.max_heatmap_rows,
                        options.max_heatmap_columns, time);
            }
        }
        Table steps("imbalance_steps", {"step", "measured max/mean", "predicted max/mean"});
        const auto predicted_degree = im.predicted_by_step.column_imbalance();
        for (std::size_t c = 0; c < degree.size(); ++c) {
            steps.add(
                {int_cell(im.compute_by_step.columns[c]), fixed_cell(degree[c], 3),
                 fixed_cell(c < predicted_degree.size() ? predicted_degree[c] : std::nan(""), 3)});
        }
        out += "<details><summary>imbalance degree per step</summary>";
        steps.render(out);
        out += "</details>\n";
    }
    out += heading(index, "stragglers", "Stragglers") + "\n";
    if (im.stragglers.empty()) {
        out += "<p class=\"empty\">No rank arrived last at a collective while others waited.</p>\n";
        return;
    }
    BarSeries bars;
    bars.series = {"others' wait caused"};
    for (std::size_t i = 0; i < std::min<std::size_t>(im.stragglers.size(), 32); ++i) {
        bars.categories.push_back("rank " + std::to_string(im.stragglers[i].rank));
        bars.values.push_back({double(im.stragglers[i].caused_wait_ns)});
    }
    out += "<p class=\"caption\">Ranks that arrived last at collectives (the " +
           std::to_string(bars.categories.size()) +
           " with the most last arrivals) and how long the others waited for them.</p>";
    bar_chart(out, "stragglers", index, "stragglers", bars,
              [](double v) { return duration_text(v); });
    Table table("stragglers", {"rank", "last arrivals", "instances", "others waited"});
    for (const auto& s : im.stragglers) {
        table.add({int_cell(s.rank), int_cell(s.last_arrivals), int_cell(s.instances),
                   duration_cell(double(s.caused_wait_ns))});
    }
    table.render(out);
}

void section_cost_model(const ReportRun& run, int index, std::string& out) {
    const auto& a = run.analysis;
    out += heading(index, "cost-model", "Cost model") + "\n";
    if (!a.cost_model) {
        out += "<p class=\"empty\">No cost model could be fitted (see the notes below).</p>\n";
        return;
    }
    out +=
        "<p>t = fixed + per_token·tokens + per_pair·pairs, fitted on this run's passes; "
        "collectives t = latency + per_byte·bytes (docs/analyses.md).</p>\n";
    Table passes("cost_passes",
                 {"stage", "phase", "fixed", "ns/token", "ns/pair", "samples", "r²", "mean |err|"});
    for (const auto& p : a.cost_model->passes) {
        passes.add({int_cell(p.stage), text_cell(to_string(p.phase)), duration_cell(p.fixed_ns),
                    fixed_cell(p.per_token_ns, 4), fixed_cell(p.per_pair_ns, 6),
                    int_cell(p.fit.samples), fixed_cell(p.fit.r_squared, 3),
                    percent_cell(p.fit.mean_abs_rel_error, 1)});
    }
    passes.render(out);
    if (!a.cost_model->collectives.empty()) {
        Table collectives("cost_collectives",
                          {"collective", "latency", "ns/byte", "samples", "mean |err|"});
        for (const auto& c : a.cost_model->collectives) {
            collectives.add({text_cell(c.name), duration_cell(c.latency_ns),
                             fixed_cell(c.per_byte_ns, 6), int_cell(c.fit.samples),
                             percent_cell(c.fit.mean_abs_rel_error, 1)});
        }
        collectives.render(out);
    }
}

void section_gaps(const ReportRun& run, int index, const ReportOptions& options, std::string& out) {
    out += heading(index, "gaps", "What was not recorded or analysed") + "\n";
    std::int64_t dropped = 0;
    std::vector<const RankInfo*> affected;
    for (const auto& r : run.ranks) {
        dropped += r.dropped_records;
        if (!r.complete || r.dropped_records > 0) {
            affected.push_back(&r);
        }
    }
    out += "<p data-gaps=\"1\">" + std::to_string(affected.size()) + " of " +
           std::to_string(run.ranks.size()) + " ranks incomplete or with dropped records; " +
           std::to_string(dropped) + " records dropped in all; " +
           std::to_string(run.import_log.size()) + " import log entries.</p>\n";
    if (!affected.empty()) {
        Table table("dropped", {"rank", "host", "complete", "dropped records"});
        for (const RankInfo* r : affected) {
            table.add({int_cell(r->rank), text_cell(r->host),
                       text_cell(r->complete ? "yes" : "no (stopped early)"),
                       int_cell(r->dropped_records)});
        }
        table.render(out);
    }
    if (!run.import_log.empty()) {
        Table table("import_log", {"source", "record", "reason", "content"});
        for (std::size_t i = 0; i < std::min(run.import_log.size(), options.max_import_log_rows);
             ++i) {
            const auto& e = run.import_log[i];
            std::string content(clip(e.record, 300));
            if (content.size() < e.record.size()) {
                content += "…";
            }
            // A note stands for no record: no index to show.
            table.add({text_cell(e.source),
                       e.record_index >= 0 ? int_cell(e.record_index) : text_cell("—"),
                       text_cell(e.reason), text_cell(content)});
        }
        out += "<p>Import log" +
               std::string(run.import_log.size() > options.max_import_log_rows
                               ? " (the first " + std::to_string(options.max_import_log_rows) +
                                     " of " + std::to_string(run.import_log.size()) + ")"
                               : "") +
               ":</p>";
        table.render(out);
    }
    if (!run.analysis.notes.empty()) {
        out += "<p>Not analysed:</p><ul class=\"notes\">";
        for (const auto& note : run.analysis.notes) {
            out += "<li>" + html_escape(note) + "</li>";
        }
        out += "</ul>\n";
    }
}

// Predicted against measured, one row per run: with runs that differ in their balancer, how
// each balancer did and how well the cost model saw it coming.
void section_comparison(const std::vector<ReportRun>& runs, std::string& out) {
    out += "<section id=\"comparison\"><h2>" +
           std::string(runs.size() > 1 ? "Balancer comparison" : "Predicted against measured") +
           "</h2>\n";
    out +=
        "<p class=\"caption\">Step: mean over steps of the slowest rank's step wall time. "
        "Compute critical path: mean over steps of the busiest rank's compute (imbalance "
        "matrix), measured and as the run's own cost model predicts it from the work each "
        "rank held. Error: mean |predicted − measured| / measured over ranks and steps.</p>";
    BarSeries bars;
    bars.stacked = false;
    bars.series = {"measured step", "measured compute critical path",
                   "predicted compute critical path"};
    Table table("comparison",
                {"run", "balancer", "CP sharding", "schedule", "grid", "step (slowest rank)",
                 "compute critical path", "predicted", "prediction error", "compute imbalance",
                 "predicted imbalance", "bubble fraction", "CP imbalance"});
    for (std::size_t i = 0; i < runs.size(); ++i) {
        const RunAnalysis& a = runs[i].analysis;
        double step_sum = 0;
        int steps = 0;
        for (const auto& [step, s] : breakdown_by_step(a)) {
            if (step.whole_trace) {
                continue;  // a whole trace is no step
            }
            step_sum += double(s.max_wall_ns);
            ++steps;
        }
        const double step_ns = steps > 0 ? step_sum / steps : std::nan("");
        const double measured = mean_column_max(a.imbalance.compute_by_step);
        const double predicted = a.imbalance.predicted_is_time
                                     ? mean_column_max(a.imbalance.predicted_by_step)
                                     : std::nan("");
        const double error =
            a.imbalance.predicted_is_time
                ? mean_relative_error(a.imbalance.compute_by_step, a.imbalance.predicted_by_step)
                : std::nan("");
        const std::string label = run_label(runs[i], i);
        bars.categories.push_back(label + " (" + text_or_unknown(a.config.balancer) + ")");
        bars.values.push_back({step_ns, measured, predicted});
        table.add({text_cell(label), text_cell(text_or_unknown(a.config.balancer)),
                   text_cell(text_or_unknown(a.config.cp_shard)),
                   text_cell(text_or_unknown(schedule_text(a.config))),
                   text_cell(describe_grid(a.config)), duration_cell(step_ns),
                   duration_cell(measured), duration_cell(predicted), percent_cell(error, 1),
                   figure_cell(a.imbalance.compute_imbalance, 3),
                   figure_cell(a.imbalance.predicted_imbalance, 3),
                   figure_cell(a.bubbles.mean_measured_fraction, 3),
                   figure_cell(a.cp_load.mean_measured_imbalance, 3)});
    }
    bar_chart(out, "comparison", -1, "predicted against measured", bars,
              [](double v) { return duration_text(v); });
    table.render(out);
    out += "</section>\n";
}

}  // namespace

std::string html_report(const std::vector<ReportRun>& runs, const ReportOptions& options) {
    std::string title = options.title;
    if (title.empty()) {
        title = "Fulcrum report: ";
        for (std::size_t i = 0; i < runs.size(); ++i) {
            title += (i > 0 ? ", " : "") + run_label(runs[i], i);
        }
    }
    std::string out;
    out.reserve(1 << 20);
    open_document(out, title,
                  "Made by fulcrum report. Hover a mark for its value; wheel to zoom, drag to pan, "
                  "double-click or \"reset zoom\" to reset; click a table header to sort. "
                  "Definitions: docs/analyses.md.");
    out += "<nav><ul>";
    out += "<li><a href=\"#comparison\">" +
           std::string(runs.size() > 1 ? "Balancer comparison" : "Predicted against measured") +
           "</a></li>";
    if (options.plan != nullptr) {
        out += "<li><a href=\"#plan\">Plan</a></li>";
    }
    for (std::size_t i = 0; i < runs.size(); ++i) {
        out += "<li><a href=\"#run-" + std::to_string(i) + "\">" +
               html_escape(run_label(runs[i], i)) + "</a></li>";
    }
    out += "</ul></nav></header>\n";
    section_comparison(runs, out);
    if (options.plan != nullptr) {
        plan_section(options.plan->request, options.plan->result, out);
    }
    if (runs.size() > 1) {
        std::vector<std::string> labels, balancers;
        std::vector<RunThroughput> throughputs;
        for (std::size_t i = 0; i < runs.size(); ++i) {
            labels.push_back(run_label(runs[i], i));
            balancers.push_back(text_or_unknown(runs[i].analysis.config.balancer));
            throughputs.push_back(runs[i].throughput);
        }
        out += throughput_section_html(labels, balancers, throughputs);
    }
    for (std::size_t i = 0; i < runs.size(); ++i) {
        const int index = static_cast<int>(i);
        out += "<section class=\"run\" id=\"run-" + std::to_string(i) + "\"><h2>" +
               html_escape(run_label(runs[i], i)) + "</h2>\n";
        section_config(runs[i], index, out);
        section_breakdown(runs[i], index, out);
        section_bubbles(runs[i], index, out);
        section_cp_load(runs[i], index, out);
        section_offload(runs[i], index, out);
        section_memory(runs[i], index, out);
        section_imbalance(runs[i], index, options, out);
        section_cost_model(runs[i], index, out);
        hot_switch_section(runs[i].analysis.hot_switch, runs[i].analysis.config.hot_switch, index,
                           out);
        hta_sections(runs[i].analysis, index, out);
        if (runs[i].diff) {
            diff_section(*runs[i].diff, run_label(runs[0], 0), index, out);
        }
        section_gaps(runs[i], index, options, out);
        out += "</section>\n";
    }
    close_document(out);
    return out;
}

}  // namespace fulcrum::report
