// fulcrum analyze RUN: the analyses of docs/analyses.md as tables, or as JSON.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <utility>

#include "app/cli/cli_common.h"
#include "app/cli/commands.h"
#include "app/cli/hta_tables.h"
#include "core/analysis/run_analysis.h"
#include "core/store/trace_reader.h"
#include "core/util/text_table.h"

namespace fulcrum::cli {
namespace {

using analysis::RunAnalysis;
using Align = TextTable::Align;

struct AnalyzeArgs {
    std::string run;
    bool json = false;
    std::string output;
    bool force = false;
    int top = 16;
};

std::string scientific(double value) {
    char text[48];
    std::snprintf(text, sizeof text, "%.4g", value);
    return text;
}

std::string mean_duration(std::int64_t total, std::int64_t count) {
    return count > 0 ? format_duration(total / count) : kUnknownFigure;
}

// The step column of a breakdown row: its number, "whole trace" for the window over a rank's
// whole trace, "—" for a step range without a number.
using analysis::StepKey;

std::string step_label(const StepKey& key) {
    if (key.whole_trace) {
        return "whole trace";
    }
    return key.step ? std::to_string(*key.step) : kUnknownFigure;
}

void render_summary(const RunAnalysis& a, std::string& out) {
    const auto& c = a.config;
    out += "run      " + a.run.name + " (" + std::string(to_string(a.run.origin)) + ")\n";
    out += "grid     " + describe_grid(c) + "\n";
    out += "setup    schedule " + text_or_unknown(schedule_text(c)) + ", balancer " +
           text_or_unknown(c.balancer) + ", cp sharding " + text_or_unknown(c.cp_shard) + ", " +
           (c.layout.microbatches > 0 ? std::to_string(c.layout.microbatches) + " micro-batches"
                                      : std::string("micro-batches ") + kUnknownFigure) +
           "\n";
    out += "events   " + std::to_string(a.events) + " (" + std::to_string(a.passes) + " passes)\n";
    const int world = c.layout.grid.world();
    if (c.host_cores > 0 && world > c.host_cores) {
        out += "cores    " + std::to_string(c.host_cores) + " a host, shared by its ranks (" +
               std::to_string(world) +
               " in all): a pass's time includes its waits for a core, which fulcrum simulate "
               "plays (docs/simulate.md, \"Ranks that share cores\")\n";
    }
}

void render_breakdown(const RunAnalysis& a, std::string& out) {
    if (a.breakdown.empty()) {
        return;
    }
    out += "\nstep breakdown (mean over ranks; shares of the step's wall time)\n";
    TextTable table({"step", "ranks", "wall", "slowest", "compute", "comm overlapped",
                     "comm exposed", "other", "idle"},
                    std::vector<Align>(9, Align::right));
    for (const auto& [step, s] : analysis::breakdown_by_step(a.breakdown)) {
        table.add_row(
            {step_label(step), std::to_string(s.ranks), mean_duration(s.wall_ns, s.ranks),
             format_duration(s.max_wall_ns), format_percent(s.compute_ns, s.wall_ns),
             format_percent(s.overlapped_ns, s.wall_ns), format_percent(s.exposed_ns, s.wall_ns),
             format_percent(s.other_ns, s.wall_ns), format_percent(s.idle_ns, s.wall_ns)});
    }
    out += table.render("  ");
}

void render_bubbles(const RunAnalysis& a, std::string& out) {
    const auto& b = a.bubbles;
    if (b.stages.empty()) {
        if (a.config.grid_known && a.config.layout.grid.pp == 1 && a.passes > 0) {
            out += "\npipeline bubbles: none (pp 1: no pipeline)\n";
        }
        return;
    }
    out += "\npipeline bubbles (" + b.schedule +
           (b.schedule_assumed ? " assumed: the run does not say its schedule" : "") + ", theory " +
           theory_formula(b) + " = " + format_figure(b.theory_fraction, 3) + ", measured " +
           format_figure(b.mean_measured_fraction, 3) + " of busy time)\n";
    TextTable table({"stage", "busy", "bubble", "fraction", "warm-up/cool-down", "unequal mbs",
                     "other", "wait prev", "wait next"},
                    std::vector<Align>(9, Align::right));
    for (const auto& [stage, s] : analysis::bubble_by_stage(b)) {
        table.add_row({std::to_string(stage), mean_duration(s.busy_ns, s.rows),
                       mean_duration(s.bubble_ns, s.rows),
                       s.fraction() ? format_fixed(*s.fraction(), 3) : kUnknownFigure,
                       format_percent(s.warmup_cooldown_ns, s.bubble_ns),
                       format_percent(s.unequal_microbatch_ns, s.bubble_ns),
                       format_percent(s.other_ns, s.bubble_ns),
                       mean_duration(s.wait_on_previous_ns, s.rows),
                       mean_duration(s.wait_on_next_ns, s.rows)});
    }
    out += "  per stage, mean over steps and pipelines; the parts are shares of the bubble\n";
    out += table.render("  ");
}

void render_cp_load(const RunAnalysis& a, std::string& out) {
    const auto& cp = a.cp_load;
    if (cp.groups.empty()) {
        return;
    }
    out += "\nCP attention load (" + std::to_string(cp.groups.size()) + " groups, sharding " +
           text_or_unknown(cp.sharding) + ")\n";
    out += "  imbalance max/mean: measured " + format_figure(cp.mean_measured_imbalance, 3) +
           ", predicted " + format_figure(cp.mean_predicted_imbalance, 3) + "\n";
    const bool ulysses =
        a.config.layout.context_parallelism == parallel::ContextParallelism::ulysses;
    if (ulysses) {
        out +=
            "  Ulysses splits the heads: attention is even whatever the sharding; below, what "
            "the same documents would give under all-gather CP\n";
    }
    if (!cp.mean_predicted_by_sharding.empty()) {
        TextTable table({ulysses ? "sharding (all-gather CP)" : "sharding", "predicted imbalance"},
                        {Align::left, Align::right});
        for (const auto& [name, value] : cp.mean_predicted_by_sharding) {
            table.add_row({name + (name == cp.sharding ? " (used)" : ""), format_fixed(value, 3)});
        }
        out += table.render("  ");
    }
    // Means over the groups where the rank has the figure (a pass, a workload row).
    struct Sums {
        std::int64_t attention = 0, attention_count = 0, pairs = 0, pairs_count = 0;
    };
    std::map<int, Sums> by_cp_rank;
    for (const auto& group : cp.groups) {
        for (const auto& rank : group.ranks) {
            Sums& sums = by_cp_rank[rank.cp_rank];
            if (rank.attention_ns) {
                sums.attention += *rank.attention_ns;
                ++sums.attention_count;
            }
            if (rank.pairs) {
                sums.pairs += *rank.pairs;
                ++sums.pairs_count;
            }
        }
    }
    TextTable ranks({"cp rank", "attention (mean)", "pairs (mean)"},
                    std::vector<Align>(3, Align::right));
    for (const auto& [cp_rank, sums] : by_cp_rank) {
        ranks.add_row({std::to_string(cp_rank), mean_duration(sums.attention, sums.attention_count),
                       sums.pairs_count > 0 ? std::to_string(sums.pairs / sums.pairs_count)
                                            : kUnknownFigure});
    }
    out += ranks.render("  ");
}

void render_offload(const RunAnalysis& a, std::string& out) {
    const auto& o = a.offload;
    const std::string pageable =
        std::to_string(o.pageable_copies) +
        (o.pageable_copies == 1 ? " host/device copy" : " host/device copies") +
        " of pageable memory, " + format_duration(o.pageable_copy_ns) +
        ": data loads, read-backs, staging; synchronous, not offload";
    const std::string staging =
        std::to_string(o.staging_copies) +
        (o.staging_copies == 1 ? " pinned staging copy, " : " pinned staging copies, ") +
        format_duration(o.staging_copy_ns) +
        ": uploads of ranks that send nothing out, read-backs under a page; not offload";
    if (o.ranks.empty()) {
        if (o.pageable_copies > 0 || o.staging_copies > 0) {
            std::string left_out = o.pageable_copies > 0 ? pageable : "";
            if (o.staging_copies > 0) {
                left_out += (left_out.empty() ? "" : "; ") + staging;
            }
            out += "\noffload copies: none (" + left_out + ")\n";
        }
        return;
    }
    out += "\noffload copies: " + format_duration(o.copy_ns) + ", " +
           format_percent(o.overlapped_ns, o.copy_ns) + " hidden behind compute, " +
           format_duration(o.exposed_ns) + " exposed, " +
           (o.bandwidth_gb_s ? format_fixed(*o.bandwidth_gb_s, 2) + " GB/s" : "bandwidth unknown") +
           "\n";
    out += "  smallest chunk that hides its copy: " + analysis::chunk_size_text(o) + " (" +
           o.chunk_note + ")\n";
    if (o.pageable_copies > 0) {
        out += "  left out: " + pageable + "\n";
    }
    if (o.staging_copies > 0) {
        out += "  left out: " + staging + "\n";
    }
}

// Memory per pipeline stage: the fullest rank's measured peak beside the memory model's
// prediction for the stage, in parts (core/analysis/memory.h).
void render_memory(const RunAnalysis& a, std::string& out) {
    const analysis::MemoryAnalysis& memory = a.memory;
    if (memory.ranks.empty()) {
        return;
    }
    constexpr double kMiB = 1024.0 * 1024.0;
    auto mib = [&](const auto& bytes) {
        return bytes ? format_fixed(double(*bytes) / kMiB, 2) : std::string(kUnknownFigure);
    };
    out += "\nmemory per rank (" + memory.techniques +
           "; predicted: the memory model's count for full micro-batches)\n";
    TextTable table({"stage", "ranks", "fullest rank", "peak MiB", "predicted", "error",
                     "model state", "workspace", "activations", "pinned MiB", "predicted pinned"},
                    std::vector<Align>(11, Align::right));
    for (const analysis::StageMemoryRow& row : analysis::memory_by_stage(memory)) {
        const analysis::RankMemory& r = row.fullest;
        const bool both = r.peak_bytes && r.predicted_bytes;
        const bool predicted = r.predicted_bytes.has_value();
        table.add_row({row.stage >= 0 ? std::to_string(row.stage) : kUnknownFigure,
                       std::to_string(row.ranks), std::to_string(r.rank), mib(r.peak_bytes),
                       mib(r.predicted_bytes),
                       both ? format_relative_error(*r.predicted_bytes, double(*r.peak_bytes))
                            : kUnknownFigure,
                       predicted ? format_fixed(r.model_state_bytes / kMiB, 2) : kUnknownFigure,
                       predicted ? format_fixed(r.workspace_bytes / kMiB, 2) : kUnknownFigure,
                       predicted ? format_fixed(r.activations_bytes / kMiB, 2) : kUnknownFigure,
                       mib(r.peak_pinned_bytes), mib(r.predicted_pinned_bytes)});
    }
    out += table.render("  ");
    if (!memory.note.empty()) {
        out += "  " + memory.note + "\n";
    }
}

void render_imbalance(const RunAnalysis& a, const AnalyzeArgs& args, std::string& out) {
    const auto& im = a.imbalance;
    const auto& matrix = im.compute_by_step;
    if (matrix.rows.empty()) {
        return;
    }
    out +=
        "\ncompute imbalance across ranks (max/mean per step; " +
        std::string(analysis::kImbalanceOverSteps) + "): measured " +
        format_figure(im.compute_imbalance, 3) + ", predicted " +
        format_figure(im.predicted_imbalance, 3) +
        (im.has_prediction ? std::string(im.predicted_is_time ? " (cost model)" : " (causal pairs)")
                           : std::string()) +
        "\n";
    // The ranks with the most compute, so a 4096-rank run still prints a readable table.
    std::vector<std::size_t> order(matrix.rows.size());
    std::vector<double> totals(matrix.rows.size(), 0.0);
    for (std::size_t r = 0; r < matrix.rows.size(); ++r) {
        order[r] = r;
        for (std::size_t c = 0; c < matrix.columns.size(); ++c) {
            if (std::isfinite(matrix.at(r, c))) {
                totals[r] += matrix.at(r, c);
            }
        }
    }
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t x, std::size_t y) { return totals[x] > totals[y]; });
    const std::size_t shown =
        std::min<std::size_t>(order.size(), static_cast<std::size_t>(std::max(args.top, 1)));
    std::vector<std::string> headers = {"rank"};
    const std::size_t columns = std::min<std::size_t>(matrix.columns.size(), 12);
    for (std::size_t c = 0; c < columns; ++c) {
        headers.push_back("step " + std::to_string(matrix.columns[c]));
    }
    TextTable table(headers, std::vector<Align>(headers.size(), Align::right));
    for (std::size_t i = 0; i < shown; ++i) {
        const std::size_t r = order[i];
        std::vector<std::string> cells = {std::to_string(matrix.rows[r])};
        for (std::size_t c = 0; c < columns; ++c) {
            const double value = matrix.at(r, c);
            cells.push_back(std::isfinite(value) ? format_duration(std::int64_t(value))
                                                 : kUnknownFigure);
        }
        table.add_row(std::move(cells));
    }
    std::vector<std::string> degree = {"max/mean"};
    const auto column_imbalance = matrix.column_imbalance();
    for (std::size_t c = 0; c < columns; ++c) {
        degree.push_back(format_fixed(column_imbalance[c], 3));
    }
    table.add_row(std::move(degree));
    out += "  compute per rank and step" +
           std::string(shown < order.size() ? " (the " + std::to_string(shown) + " busiest of " +
                                                  std::to_string(order.size()) + " ranks)"
                                            : "") +
           "\n";
    out += table.render("  ");
}

// Stragglers stand apart from the compute matrices: a trace without passes (an import) still
// has collectives matched across its ranks.
void render_stragglers(const RunAnalysis& a, std::string& out) {
    const auto& stragglers = a.imbalance.stragglers;
    if (stragglers.empty()) {
        return;
    }
    out += "\nstragglers (last to arrive at collectives matched across ranks)\n";
    TextTable table({"rank", "last arrivals", "of", "others waited"},
                    std::vector<Align>(4, Align::right));
    for (std::size_t i = 0; i < std::min<std::size_t>(stragglers.size(), 8); ++i) {
        const auto& s = stragglers[i];
        table.add_row({std::to_string(s.rank), std::to_string(s.last_arrivals),
                       std::to_string(s.instances), format_duration(s.caused_wait_ns)});
    }
    out += table.render("  ");
}

void render_cost_model(const RunAnalysis& a, std::string& out) {
    if (!a.cost_model) {
        return;
    }
    const auto& model = *a.cost_model;
    out += "\ncost model (t = fixed + per_token·tokens + per_pair·pairs)\n";
    TextTable passes(
        {"stage", "phase", "fixed", "ns/token", "ns/pair", "samples", "r²", "mean |err|"},
        {Align::right, Align::left, Align::right, Align::right, Align::right, Align::right,
         Align::right, Align::right});
    for (const auto& pass : model.passes) {
        passes.add_row({std::to_string(pass.stage), std::string(to_string(pass.phase)),
                        format_duration(std::int64_t(pass.fixed_ns)), scientific(pass.per_token_ns),
                        scientific(pass.per_pair_ns), std::to_string(pass.fit.samples),
                        format_fixed(pass.fit.r_squared, 3),
                        format_percent(std::int64_t(pass.fit.mean_abs_rel_error * 1e6), 1000000)});
    }
    out += passes.render("  ");
    if (!model.collectives.empty()) {
        TextTable collectives(
            {"collective", "latency", "ns/byte", "samples", "r²", "mean |err|"},
            {Align::left, Align::right, Align::right, Align::right, Align::right, Align::right});
        for (const auto& c : model.collectives) {
            collectives.add_row(
                {c.name, format_duration(std::int64_t(c.latency_ns)),
                 c.per_byte_fitted() ? scientific(c.per_byte_ns)
                                     : "— (all " + std::to_string(c.fitted_bytes) + " B)",
                 // A median at one size has no r² to speak of.
                 std::to_string(c.fit.samples),
                 c.per_byte_fitted() ? format_fixed(c.fit.r_squared, 3) : std::string("—"),
                 format_percent(std::int64_t(c.fit.mean_abs_rel_error * 1e6), 1000000)});
        }
        out += collectives.render("  ");
    }
}

// HotSPa's breakdown (SOSP'24, Table 3): a row per bucket under its layout, 'others' the
// switching; then the switch-cost matrix, layout i → j.
void render_hot_switch(const RunAnalysis& a, std::string& out) {
    const analysis::HotSwitchAnalysis& hot = a.hot_switch;
    if (hot.empty()) {
        return;
    }
    out += "\nhot switching (" + std::to_string(hot.steps) +
           " steps; time summed over them, shares of the steps' time)\n";
    TextTable buckets({"bucket", "layout", "documents", "tokens", "micro-batches", "time", "share"},
                      {Align::left, Align::left, Align::right, Align::right, Align::right,
                       Align::right, Align::right});
    for (const analysis::HotSwitchBreakdownRow& row : analysis::breakdown_rows(hot)) {
        const bool bucket = row.kind == analysis::HotSwitchBreakdownRow::Kind::bucket;
        const auto count = [&](std::int64_t n) { return bucket ? std::to_string(n) : ""; };
        buckets.add_row({row.label, row.layout, count(row.documents), count(row.tokens),
                         count(row.microbatches), format_duration(row.ns),
                         format_percent(row.ns, hot.step_ns)});
    }
    out += buckets.render("  ");
    out += "\nswitch cost, layout i -> j (mean per switch: time / bytes sent by all ranks)\n";
    std::vector<std::string> header{"from \\ to"};
    header.insert(header.end(), hot.layouts.begin(), hot.layouts.end());
    TextTable matrix(header, std::vector<Align>(header.size(), Align::right));
    for (const std::string& from : hot.layouts) {
        std::vector<std::string> row{from};
        for (const std::string& to : hot.layouts) {
            const analysis::HotSwitchCost* cell = hot.cost(from, to);
            row.push_back(cell == nullptr || cell->count == 0
                              ? std::string(from == to ? "" : "-")
                              : format_duration(cell->ns / cell->count) + " / " +
                                    format_bytes(std::llround(cell->bytes / cell->count)));
        }
        matrix.add_row(std::move(row));
    }
    out += matrix.render("  ");
}

int run_analyze(const AnalyzeArgs& args) {
    auto reader = store::TraceReader::open(args.run);
    if (!reader) {
        return report_error(reader.error());
    }
    install_interrupt_handler();
    std::atomic<bool> cancel{false};
    auto analyzing = staged_progress_line();
    analysis::AnalyzeOptions options;
    options.progress = [&](std::string_view stage, double fraction) {
        if (!analyzing("analysing: " + std::string(stage), fraction)) {
            cancel.store(true);
        }
    };
    options.cancel = &cancel;
    options.read_workload = false;  // the analyses read it a step at a time; nothing else shows it
    // A rank at a time from the file: the run is never in memory whole.
    analysis::RunTrace metadata;
    auto result = analysis::analyze_run_file(*reader, metadata, options);
    finish_progress_line();
    if (!result) {
        return report_error(result.error());
    }

    // The JSON is written as it is made: a 1 B-event run's is hundreds of MB.
    const auto write_json = [&](const auto& write) {
        analysis::write_analysis_json(*result, write);
    };
    std::string out;
    if (!args.json) {
        render_summary(*result, out);
        render_breakdown(*result, out);
        render_bubbles(*result, out);
        render_cp_load(*result, out);
        render_offload(*result, out);
        render_memory(*result, out);
        render_imbalance(*result, args, out);
        render_stragglers(*result, out);
        render_cost_model(*result, out);
        render_hot_switch(*result, out);
        render_hta_tables(*result, args.top, out);
        if (!result->notes.empty()) {
            out += "\nnot analysed\n";
            for (const auto& note : result->notes) {
                out += "  - " + note + "\n";
            }
        }
    }
    if (auto status = args.json ? write_output(args.output, args.force, write_json)
                                : write_output(args.output, args.force, out);
        !status) {
        return report_error(status.error());
    }
    if (reader->incomplete()) {
        warn("'" + args.run +
             "' is incomplete: a rank's recording stopped early; the analyses cover what was "
             "committed");
        return kExitIncomplete;
    }
    return kExitOk;
}

}  // namespace

Command add_analyze_command(CLI::App& app) {
    auto args = std::make_shared<AnalyzeArgs>();
    auto* sub = app.add_subcommand(
        "analyze",
        "Analyse a run: step breakdown, pipeline bubbles and their causes, CP attention load, "
        "offload overlap, imbalance and stragglers, a fitted cost model, kernels by type, idle "
        "time by cause, communication by collective and the critical path of each step "
        "(definitions: docs/analyses.md)");
    sub->add_option("run", args->run, "A run database (.fulcrum) or a per-rank file (.sqlite)")
        ->required();
    sub->add_flag("--json", args->json,
                  "Write the analyses as JSON (format version 1, documented in docs/analyses.md)");
    sub->add_option("-o,--output", args->output, "Write to this file instead of standard output");
    sub->add_flag("--force", args->force, "Replace the output file if it exists");
    sub->add_option("--top", args->top,
                    "Rows shown in per-rank, per-stream, per-kernel and per-step tables; past "
                    "this many collective groups, each name's groups are summed first and the "
                    "groups furthest below their name's bandwidth follow")
        ->capture_default_str()
        ->check(CLI::Range(1, 1 << 20));
    return [args] { return run_analyze(*args); };
}

}  // namespace fulcrum::cli
