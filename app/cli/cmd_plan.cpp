// fulcrum plan: which DP × TP × PP × CP layout (with schedule, recomputation, balancer, CP
// sharding and layer split) to run a model on a world of GPUs, ranked by the simulator's
// tokens/s among those that fit in memory (core/plan/planner.h, docs/plan.md).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>

#include "app/cli/cli_common.h"
#include "app/cli/commands.h"
#include "app/launch/command_line.h"
#include "core/analysis/run_trace.h"
#include "core/parallel/layout_flags.h"
#include "core/plan/hot_switch_search.h"
#include "core/plan/planner.h"
#include "core/report/plan_section.h"
#include "core/sim/hardware.h"
#include "core/store/trace_reader.h"
#include "core/util/text_table.h"

namespace fulcrum::cli {
namespace {

struct PlanArgs {
    plan::PlanRequest request;
    std::string world = "8";
    std::string hardware = "h100";
    std::string dtype = "bf16";
    std::string grad_reduce_dtype;  // "": fp16 under --dtype fp16, else fp32
    std::vector<std::string> calibrate;
    std::string cost_model;
    std::string schedules = "1f1b,interleaved,zb-h1,gpipe";
    std::string virtual_stages = "2,4";
    std::string balancers = "fixed,wlb";
    std::string shardings = "per-doc,zigzag,adaptive";
    std::string recomputes = "none,selective,full";
    bool no_sequence_parallel = false;
    bool no_offload = false;
    bool no_distributed_optimizer = false;
    std::string zero_stages = "1";
    std::string cp_impls = "all-gather";
    std::string attention_backend;  // empty: the --hardware system's (flash unless it says)
    bool equal_split = false;
    int host_cores = -1;  // -1: not given
    std::string output;
    std::string report;
    bool force = false;
    bool json = false;
    bool progress = false;
    std::string hot_switch;  // "auto": choose a hot-switch spec too (hot_switch_search.h)
    std::string rank_orders = "tp-cp-dp-pp,tp-cp-pp-dp";
    bool longest_context = false;
    int max_context = 16 << 20;
    plan::HotSwitchSearchOptions hot_switch_options;
};

std::vector<std::string> split_list(const std::string& text) {
    std::vector<std::string> items;
    std::stringstream stream(text);
    std::string item;
    while (std::getline(stream, item, ',')) {
        if (!item.empty()) {
            items.push_back(item);
        }
    }
    return items;
}

// "4096", "256,1024", or "256-4096": every power-of-two multiple of 256 up to 4096.
Result<std::vector<int>> parse_worlds(const std::string& text) {
    const auto dash = text.find('-');
    if (dash == std::string::npos) {
        return parse_int_list(text, "--world", "1024 or 256,512");
    }
    auto low = parse_int_list(text.substr(0, dash), "--world", "256-4096");
    auto high = parse_int_list(text.substr(dash + 1), "--world", "256-4096");
    if (!low || !high || low->size() != 1 || high->size() != 1 || low->front() > high->front()) {
        return Error{ErrorCode::invalid_input, "--world '" + text +
                                                   "': a range is LOW-HIGH, e.g. 256-4096 (LOW, "
                                                   "2·LOW, 4·LOW, ... up to HIGH)"};
    }
    std::vector<int> worlds;
    for (long world = low->front(); world <= high->front(); world *= 2) {
        worlds.push_back(static_cast<int>(world));
    }
    return worlds;
}

// Parses each name of a comma-separated list with `parse`; the error names `option`.
template <typename T, typename Parse>
Result<std::vector<T>> parse_names(const std::string& text, const std::string& option,
                                   Parse parse) {
    std::vector<T> values;
    for (const std::string& name : split_list(text)) {
        auto value = parse(name);
        if (!value) {
            return Error{ErrorCode::invalid_input, option + ": " + value.error().message};
        }
        if (std::find(values.begin(), values.end(), *value) == values.end()) {
            values.push_back(*value);
        }
    }
    if (values.empty()) {
        return Error{ErrorCode::invalid_input, option + " needs at least one value"};
    }
    return values;
}

// The search space and the knobs from the options.
Status build_space(PlanArgs& args) {
    plan::PlanSpace& space = args.request.space;
    auto schedules = parse_names<parallel::PipelineSchedule>(args.schedules, "--schedules",
                                                             parallel::parse_schedule);
    auto balancers =
        parse_names<balance::Balancer>(args.balancers, "--balancers", balance::parse_balancer);
    auto shardings =
        parse_names<balance::CpSharding>(args.shardings, "--cp-shards", balance::parse_cp_sharding);
    auto recomputes = parse_names<parallel::Recompute>(args.recomputes, "--recomputes",
                                                       parallel::parse_recompute);
    auto virtual_stages = parse_int_list(args.virtual_stages, "--virtual-stages", "2,4");
    auto rank_orders = parse_names<parallel::RankOrder>(args.rank_orders, "--rank-orders",
                                                        parallel::parse_rank_order);
    if (!rank_orders) {
        return rank_orders.error();
    }
    space.rank_orders = *rank_orders;
    auto dtype = sim::parse_dtype(args.dtype);
    if (!schedules || !balancers || !shardings || !recomputes || !virtual_stages || !dtype) {
        return !schedules        ? schedules.error()
               : !balancers      ? balancers.error()
               : !shardings      ? shardings.error()
               : !recomputes     ? recomputes.error()
               : !virtual_stages ? virtual_stages.error()
                                 : dtype.error();
    }
    space.schedules = *schedules;
    space.balancers = *balancers;
    if (std::find(shardings->begin(), shardings->end(), balance::CpSharding::chunked) !=
        shardings->end()) {
        return Error{ErrorCode::invalid_input,
                     "--cp-shards: chunked sharding follows the attention's chunk, which the plan "
                     "chooses per layout; play it with fulcrum simulate --cp-shard chunked "
                     "--attention-chunk N"};
    }
    space.shardings = *shardings;
    space.recomputes = *recomputes;
    space.virtual_stages = *virtual_stages;
    space.sequence_parallel = !args.no_sequence_parallel;
    space.offload = !args.no_offload;
    auto zero_stages = parse_int_list(args.no_distributed_optimizer ? "0" : args.zero_stages,
                                      "--zero", "1 or 0,1,2,3", /*minimum=*/0);
    if (!zero_stages) {
        return zero_stages.error();
    }
    space.zero_stages.assign(zero_stages->begin(), zero_stages->end());
    for (const int zero : space.zero_stages) {
        if (zero < 0 || zero > 3) {
            return Error{ErrorCode::invalid_input,
                         "--zero takes stages from 0 to 3, not " + std::to_string(zero)};
        }
    }
    auto cp_impls = parse_names<parallel::ContextParallelism>(args.cp_impls, "--cp-impls",
                                                              parallel::parse_context_parallelism);
    if (!cp_impls) {
        return cp_impls.error();
    }
    space.cp_impls = *cp_impls;
    space.exact_layer_split = !args.equal_split;
    args.request.dtype = *dtype;
    if (!args.grad_reduce_dtype.empty()) {
        auto reduced = sim::parse_dtype(args.grad_reduce_dtype);
        if (!reduced) {
            return reduced.error();
        }
        args.request.grad_reduce_dtype = *reduced;
    }
    return {};
}

// --hardware, the fits of every --calibrate run (merged per candidate), or --cost-model FILE.
Status build_costs(PlanArgs& args, std::atomic<bool>& cancel) {
    plan::PlanRequest& request = args.request;
    auto preset = sim::hardware_preset(args.hardware);
    if (!preset) {
        return Error{ErrorCode::invalid_input, "--hardware: " + preset.error().message};
    }
    request.hardware = *preset;
    request.hardware.gpus_per_node = request.gpus_per_node;
    // The run's kernel, which the memory model and the simulator both take from here.
    if (!args.attention_backend.empty()) {
        request.hardware.unfused_attention = args.attention_backend == "unfused";
    }
    std::vector<CalibrationRun> runs;
    for (const std::string& path : args.calibrate) {
        auto run = load_calibration_run(path, args.progress, cancel);
        if (!run) {
            return run.error();
        }
        runs.push_back(std::move(*run));
    }
    if (!runs.empty()) {
        // Adaptive CP sharding weighs the first run's kernel (its backend's).
        if (auto settings = sim::config_from_run(runs.front().run)) {
            request.attention_kernel = settings->config.attention_kernel;
        }
    }
    if (!args.cost_model.empty()) {
        auto model = read_cost_model(args.cost_model);
        if (!model) {
            return model.error();
        }
        request.cost_model = std::move(*model);
        request.cost_model_file = args.cost_model;
        request.calibration_runs = args.calibrate;  // settings only, as in fulcrum simulate
        return {};
    }
    auto calibrations = calibrate_runs(runs, args.calibrate);
    if (!calibrations) {
        return calibrations.error();
    }
    request.calibrations = std::move(*calibrations);
    request.calibration_runs = args.calibrate;
    return {};
}

std::string significant(double value) {
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "%.3g", value);
    return buffer;
}

// "dp2 tp1 pp2 cp1": the CLI's way of writing a candidate's grid.
std::string grid_text(const plan::Candidate& c) {
    return "dp" + std::to_string(c.layout.grid.dp) + " tp" + std::to_string(c.layout.grid.tp) +
           " pp" + std::to_string(c.layout.grid.pp) + " cp" + std::to_string(c.layout.grid.cp);
}

// The report's knobs (recomputation, sequence parallelism) and, in the table, an uneven split.
std::string knobs_text(const plan::Candidate& c) {
    std::string text = report::knobs_text(c);
    if (!c.layout.stage_layers.empty()) {
        std::string split;
        for (int layers : c.layout.stage_layers) {
            split += (split.empty() ? "" : "/") + std::to_string(layers);
        }
        text += ", layers " + split;
    }
    return text;
}

// "-" without CP; "per-doc", or "per-doc = zigzag" where other shardings played the same.
std::string sharding_text(const plan::Candidate& c) {
    if (c.layout.grid.cp <= 1) {
        return "-";
    }
    std::string text = balance::cp_sharding_name(c.sharding);
    for (const balance::CpSharding same : c.equal_shardings) {
        text += std::string(" = ") + balance::cp_sharding_name(same);
    }
    return text;
}

// With several world sizes: each one's best candidate, and its tokens/s per GPU against the
// smallest world's (the scaling efficiency).
void print_per_world(const PlanArgs& args, const plan::PlanResult& result) {
    if (args.request.world_sizes.size() < 2) {
        return;
    }
    const auto R = TextTable::Align::right;
    const auto L = TextTable::Align::left;
    TextTable table({"GPUs", "best layout", "m", "schedule", "balancer", "tokens/s", "per GPU",
                     "MFU", "per GPU vs smallest"},
                    {R, L, R, L, L, R, R, R, R});
    double first_per_gpu = 0;
    for (int world : args.request.world_sizes) {
        const auto best = std::find_if(result.ranked.begin(), result.ranked.end(), [&](auto i) {
            return result.candidates[i].layout.grid.world() == world;
        });
        if (best == result.ranked.end()) {
            table.add_row({std::to_string(world), "nothing fits", "", "", "", "", "", "", ""});
            continue;
        }
        const plan::Candidate& c = result.candidates[*best];
        const double per_gpu = c.tokens_per_second / world;
        first_per_gpu = first_per_gpu > 0 ? first_per_gpu : per_gpu;
        table.add_row({std::to_string(world), grid_text(c), std::to_string(c.layout.microbatches),
                       parallel::schedule_name(c.layout.schedule),
                       balance::balancer_name(c.balancer), format_fixed(c.tokens_per_second, 0),
                       format_fixed(per_gpu, 0), format_percent(c.mfu, 1.0),
                       format_percent(per_gpu, first_per_gpu)});
    }
    std::printf("\nBest per world size:\n");
    std::fputs(table.render("  ").c_str(), stdout);
}

void print_table(const PlanArgs& args, const plan::PlanResult& result) {
    const auto R = TextTable::Align::right;
    const auto L = TextTable::Align::left;
    TextTable table({"rank", "layout", "m", "schedule", "knobs", "balancer", "sharding", "step",
                     "tokens/s", "MFU", "peak GiB", "bubble", "imbalance"},
                    {R, L, R, L, L, L, L, R, R, R, R, R, R});
    const std::size_t shown =
        std::min(result.ranked.size(), static_cast<std::size_t>(args.request.top_k));
    for (std::size_t i = 0; i < shown; ++i) {
        const plan::Candidate& c = result.candidates[result.ranked[i]];
        const std::string schedule = report::schedule_text(c);
        table.add_row({std::to_string(i + 1), grid_text(c), std::to_string(c.layout.microbatches),
                       schedule, knobs_text(c), balance::balancer_name(c.balancer),
                       sharding_text(c), format_duration(static_cast<std::int64_t>(c.step_ns)),
                       format_fixed(c.tokens_per_second, 0), format_percent(c.mfu, 1.0),
                       c.memory.total_gib >= 1 ? format_fixed(c.memory.total_gib, 1)
                                               : significant(c.memory.total_gib),
                       format_percent(c.bubble_fraction, 1.0), format_fixed(c.imbalance, 2)});
    }
    const plan::PlanCounts& counts = result.counts;
    std::printf(
        "fulcrum plan: %lld candidates in %.1f s; %lld do not fit, %lld fit with less "
        "recomputation, %lld estimated, %lld simulated (%s)\n\n",
        static_cast<long long>(counts.enumerated), result.elapsed_s,
        static_cast<long long>(counts.infeasible), static_cast<long long>(counts.dominated),
        static_cast<long long>(counts.estimated + counts.simulated),
        static_cast<long long>(counts.simulated), result.cost_source.c_str());
    for (const std::string& note : result.notes) {
        std::printf("  derived: %s\n", note.c_str());
    }
    if (!result.notes.empty()) {
        std::printf("\n");
    }
    if (shown == 0) {
        std::printf("No layout fits. ");
    } else {
        std::fputs(table.render().c_str(), stdout);
    }
    print_per_world(args, result);
    if (!counts.infeasible_by_reason.empty()) {
        std::printf("\nNot feasible, by reason:\n");
        TextTable reasons({"candidates", "reason", "for example"}, {R, L, L});
        for (const auto& [kind, n] : counts.infeasible_by_reason) {
            std::string example;
            for (const plan::Candidate& c : result.candidates) {
                if (c.status == plan::CandidateStatus::infeasible && c.reason_kind == kind) {
                    example = grid_text(c) + ": " + c.reason;
                    break;
                }
            }
            reasons.add_row({std::to_string(n), kind, example});
        }
        std::fputs(reasons.render("  ").c_str(), stdout);
    }
    if (shown > 0) {
        std::printf("\nTo run each (fulcrum-train), or to simulate it (fulcrum simulate):\n");
    }
    for (std::size_t i = 0; i < shown; ++i) {
        const plan::Candidate& c = result.candidates[result.ranked[i]];
        std::printf("  %zu. %s\n     %s\n", i + 1, c.train_command.c_str(),
                    c.simulate_command.c_str());
    }
}

// -o DIR: the top k as simulated runs, DIR/rank-N.fulcrum.
Status write_runs(const PlanArgs& args, const plan::PlanResult& result, std::atomic<bool>& cancel) {
    namespace fs = std::filesystem;
    const std::size_t shown =
        std::min(result.ranked.size(), static_cast<std::size_t>(args.request.top_k));
    std::error_code ec;
    fs::create_directories(args.output, ec);
    if (ec) {
        return Error{ErrorCode::io, "cannot create '" + args.output + "': " + ec.message()};
    }
    for (std::size_t i = 0; i < shown; ++i) {
        const plan::Candidate& c = result.candidates[result.ranked[i]];
        sim::SimulationOutput output;
        output.path =
            (fs::path(args.output) / ("rank-" + std::to_string(i + 1) + ".fulcrum")).string();
        output.overwrite = args.force;
        output.command = c.simulate_command;
        output.producer = "fulcrum " FULCRUM_VERSION;
        sim::SimulationProgress progress;
        progress.progress = progress_for("writing " + output.path, args.progress, cancel);
        progress.cancel = &cancel;
        auto written =
            sim::simulate_to_file(plan::simulation_config(args.request, c), output, progress);
        finish_progress_line();
        if (!written) {
            return written.error();
        }
    }
    return {};
}

// --hot-switch auto: each world's chosen spec against its best static layout.
void print_hot_switch(const plan::PlanResult& result,
                      const std::vector<plan::HotSwitchSearch>& searches) {
    for (const plan::HotSwitchSearch& search : searches) {
        const plan::Candidate& best = result.candidates[search.static_candidate];
        std::printf(
            "\nHot switching on %d GPUs (HotSPa: a layout per length bucket), %lld specs "
            "estimated over cut points",
            search.world, static_cast<long long>(search.specs_estimated));
        for (std::int64_t cut : search.cut_points) {
            std::printf(" %lld", static_cast<long long>(cut));
        }
        std::printf(" and %zu layouts, %zu played:\n", search.layouts.size(), search.played.size());
        if (!search.found()) {
            std::printf("  no spec could be played; stay with %s.\n", grid_text(best).c_str());
            continue;
        }
        const plan::HotSwitchChoice& chosen = search.best();
        std::printf("  chosen:  %s\n", parallel::hot_switch_spec_string(chosen.spec).c_str());
        std::printf(
            "  predicted %s tokens/s (switching %s of the time) against %s tokens/s of "
            "the best static layout (%s): %sx\n",
            format_fixed(chosen.tokens_per_second, 0).c_str(),
            format_percent(chosen.switching_share, 1.0).c_str(),
            format_fixed(search.static_tokens_per_second, 0).c_str(), grid_text(best).c_str(),
            format_fixed(search.speedup(), 2).c_str());
        if (search.speedup() < 1) {
            std::printf("  no hot-switched spec beats the static layout here; stay with it.\n");
        }
        std::printf("  %s\n", search.simulate_command.c_str());
        const plan::HotSwitchChoice* runnable = search.best_runnable();
        if (runnable == nullptr) {
            std::printf(
                "  (fulcrum-train --hot-switch takes no --sequence-parallel, and no spec "
                "without it was played)\n");
        } else {
            if (runnable != &chosen) {
                std::printf(
                    "  fulcrum-train --hot-switch takes no --sequence-parallel; the best "
                    "spec without it, %s tokens/s (%sx):\n",
                    format_fixed(runnable->tokens_per_second, 0).c_str(),
                    format_fixed(runnable->tokens_per_second / search.static_tokens_per_second, 2)
                        .c_str());
            }
            std::printf("  %s\n", search.train_command.c_str());
        }
    }
}

// --longest-context: the plan at --context · 2^k up to --max-context, one row a context, until
// none fits (plan::plan_contexts).
int run_longest_context(PlanArgs& args, std::atomic<bool>& cancel) {
    plan::PlanProgress progress;
    progress.progress = progress_for("planning contexts", args.progress, cancel);
    progress.cancel = &cancel;
    auto plans = plan::plan_contexts(args.request, args.max_context, progress);
    finish_progress_line();
    if (!plans) {
        return report_error(plans.error());
    }
    const auto R = TextTable::Align::right;
    const auto L = TextTable::Align::left;
    TextTable table(
        {"context", "best layout", "m", "schedule", "knobs", "step", "tokens/s", "MFU", "peak GiB"},
        {R, L, R, L, L, R, R, R, R});
    int longest = 0;
    for (const plan::ContextPlan& row : *plans) {
        if (!row.best) {
            table.add_row({std::to_string(row.context), "none fits", "", "", "", "", "", "", ""});
            continue;
        }
        const plan::Candidate& c = *row.best;
        longest = row.context;
        table.add_row({std::to_string(row.context), grid_text(c),
                       std::to_string(c.layout.microbatches), report::schedule_text(c),
                       knobs_text(c), format_duration(static_cast<std::int64_t>(c.step_ns)),
                       format_fixed(c.tokens_per_second, 0), format_percent(c.mfu, 1.0),
                       format_fixed(c.memory.total_gib, 1)});
    }
    std::printf("fulcrum plan --longest-context: %s on %s GPUs of %s GiB (%s)\n\n",
                parallel::describe_model(args.request.model).c_str(), args.world.c_str(),
                significant(args.request.gpu_memory_gib).c_str(),
                sim::describe(args.request.hardware).c_str());
    std::fputs(table.render().c_str(), stdout);
    if (longest == 0) {
        std::printf("\nNo layout fits even %d tokens.\n", args.request.model.context);
    } else if (plans->back().best) {
        std::printf("\nLongest that fits: %d tokens or more (--max-context %d reached).\n", longest,
                    args.max_context);
    } else {
        std::printf("\nLongest that fits: %d tokens.\n", longest);
    }
    return kExitOk;
}

int run_plan(PlanArgs& args) {
    std::atomic<bool> cancel{false};
    auto worlds = parse_worlds(args.world);
    if (!worlds) {
        return report_error(worlds.error());
    }
    std::sort(worlds->begin(), worlds->end());
    worlds->erase(std::unique(worlds->begin(), worlds->end()), worlds->end());
    args.request.world_sizes = *worlds;
    if (args.host_cores >= 0) {
        args.request.host_cores = args.host_cores;
    }
    if (args.request.lengths.empty() && args.request.document_lengths.empty()) {
        const int context = args.request.model.context;
        const int median = std::max(1, std::min(1900, context / 8));
        args.request.lengths =
            "long-tail:context=" + std::to_string(context) + ",median=" + std::to_string(median);
    }
    if (auto status = build_space(args); !status) {
        return report_error(status.error());
    }
    if (!args.hot_switch.empty() && args.hot_switch != "auto") {
        return report_error({ErrorCode::invalid_input,
                             "--hot-switch '" + args.hot_switch +
                                 "': only 'auto' (choose the buckets and their layouts); to play "
                                 "a spec of your own, use fulcrum simulate --hot-switch SPEC"});
    }
    if (auto status = plan::validate(args.hot_switch_options);
        !args.hot_switch.empty() && !status) {
        return report_error(status.error());
    }
    if (auto status = plan::validate(args.request); !status) {
        return report_error(status.error());
    }
    if (auto status = build_costs(args, cancel); !status) {
        return report_error(status.error());
    }
    if (args.longest_context) {
        return run_longest_context(args, cancel);
    }
    if (!args.output.empty() && !args.force) {
        const std::string first = (std::filesystem::path(args.output) / "rank-1.fulcrum").string();
        std::error_code ec;
        if (std::filesystem::exists(first, ec)) {
            return report_error({ErrorCode::io, "'" + first +
                                                    "' already exists; remove it, choose another "
                                                    "folder, or pass --force"});
        }
    }
    plan::PlanProgress progress;
    progress.progress = progress_for("planning", args.progress, cancel);
    progress.cancel = &cancel;
    auto result = plan::plan(args.request, progress);
    finish_progress_line();
    if (!result) {
        return report_error(result.error());
    }
    launch::write_commands(args.request, *result);
    std::vector<plan::HotSwitchSearch> searches;
    if (!args.hot_switch.empty()) {
        plan::HotSwitchSearchProgress searching;
        searching.progress = progress_for("hot-switch search", args.progress, cancel);
        searching.cancel = &cancel;
        auto found =
            plan::search_hot_switch(args.request, *result, args.hot_switch_options, searching);
        finish_progress_line();
        if (!found) {
            return report_error(found.error());
        }
        searches = std::move(*found);
        launch::write_commands(args.request, *result, searches);
    }
    if (args.json) {
        std::string json = plan::plan_json(args.request, *result, args.request.top_k);
        if (!args.hot_switch.empty()) {
            // One more member, "hot_switch", before the closing brace.
            json.insert(json.rfind('}'),
                        ",\"hot_switch\":" + plan::hot_switch_search_json(*result, searches));
        }
        std::printf("%s\n", json.c_str());
    } else {
        print_table(args, *result);
        print_hot_switch(*result, searches);
    }
    if (!args.report.empty()) {
        const std::string html = report::plan_report(args.request, *result);
        if (auto status = write_output(args.report, args.force, html); !status) {
            return report_error(status.error());
        }
    }
    if (!args.output.empty()) {
        if (auto status = write_runs(args, *result, cancel); !status) {
            return report_error(status.error());
        }
    }
    return kExitOk;
}

}  // namespace

Command add_plan_command(CLI::App& app) {
    auto args = std::make_shared<PlanArgs>();
    plan::PlanRequest& r = args->request;
    auto* sub = app.add_subcommand(
        "plan",
        "Search every DP x TP x PP x CP layout of a world of GPUs (TP within a node) with its "
        "schedule, recomputation, sequence parallelism, balancer, CP sharding and layer split; "
        "drop what does not fit in GPU memory and say why; rank the rest by the simulator's "
        "tokens/s (docs/plan.md).\n\n"
        "  fulcrum plan --layers 32 --hidden 4096 --heads 32 --context 32768 --world 4096\n"
        "  fulcrum plan --calibrate run.fulcrum --world 256-1024 --top 5 -o plans");
    sub->add_option("--world", args->world,
                    "GPUs: one count, a list (256,1024) or a range LOW-HIGH of powers of two")
        ->capture_default_str()
        ->group("Cluster");
    sub->add_option("--gpus-per-node", r.gpus_per_node, "GPUs per node; TP stays within one")
        ->capture_default_str()
        ->check(CLI::PositiveNumber)
        ->group("Cluster");
    sub->add_option("--rank-orders", args->rank_orders,
                    "How the framework may number ranks, each " +
                        std::string(parallel::kRankOrderHelp) +
                        ", the default first: a layout is also played under each other order "
                        "that places its groups differently (Megatron-LM runs tp-cp-pp-dp with "
                        "--use-tp-pp-dp-mapping)")
        ->capture_default_str()
        ->group("Cluster");
    sub->add_option("--gpu-memory-gib", r.gpu_memory_gib, "Memory of one GPU")
        ->capture_default_str()
        ->group("Cluster");
    sub->add_option("--host-cores", args->host_cores,
                    "Cores a node's ranks share, as the CPU backend runs more ranks than cores "
                    "(docs/simulate.md, \"Ranks that share cores\"); default: the calibration "
                    "runs'; 0: a core or device a rank")
        ->check(CLI::NonNegativeNumber)
        ->group("Cluster");
    sub->add_option("--usable-memory", r.usable_memory_fraction,
                    "Share of GPU memory a layout may fill by the memory model (which leaves out "
                    "logits, buffers and fragmentation)")
        ->capture_default_str()
        ->group("Cluster");
    sub->add_option("--host-memory-gib", r.host_memory_gib,
                    "A node's host memory, which offloaded activations (checkpoints, FPDT's "
                    "chunks) must fit in")
        ->capture_default_str()
        ->check(CLI::PositiveNumber)
        ->group("Cluster");
    sub->add_option("--hardware", args->hardware,
                    "The analytic cost model's system: h100, a100, or a JSON file of your own "
                    "(docs/simulate.md, \"A system of your own\")")
        ->capture_default_str()
        ->group("Cluster");
    sub->add_option("--calibrate", args->calibrate,
                    "Costs fitted on this captured run instead of the analytic model; repeat it "
                    "(a pp2, a tp2, a cp2 and a dp2 run of the same model) to fit each cost on "
                    "the run nearest the candidate that ran it")
        ->group("Cluster");
    sub->add_option("--cost-model", args->cost_model,
                    "A cost model as JSON, as fulcrum simulate takes it; overrides the fits of "
                    "--calibrate")
        ->group("Cluster");
    sub->add_option("--peak-tflops", r.peak_tflops,
                    "Peak dense TFLOP/s of a GPU for MFU (default: 989 for h100, 312 for a100)")
        ->group("Cluster");

    parallel::add_model_flags(*sub, r.model, /*vocab=*/true, "Model");
    sub->add_option(
           "--dtype", args->dtype,
           "Activations and parameters: bf16, fp16 or fp32 (gradients: --grad-reduce-dtype)")
        ->capture_default_str()
        ->group("Model");
    add_grad_reduce_dtype_option(*sub, args->grad_reduce_dtype, "Model");
    add_tp_backward_overlap_flag(*sub, r.tp_backward_overlap, "Model");
    add_overlap_param_gather_flag(*sub, r.overlap_param_gather, "Model");
    add_attention_mask_option(*sub, r.packed_attention, "Model");

    sub->add_option("--global-batch", r.global_batch,
                    "Sequences of --context tokens per step over all DP replicas; micro-batches "
                    "per replica = this / dp")
        ->capture_default_str()
        ->group("Data");
    sub->add_flag("--longest-context", args->longest_context,
                  "FPDT's question: plan at --context, twice it, four times ... up to "
                  "--max-context, each step whole sequences of the context, and say the longest "
                  "that some layout fits and its best layout's tokens/s (try --zero 1,2,3 "
                  "--cp-impls all-gather,ulysses)")
        ->group("Data");
    sub->add_option("--max-context", args->max_context,
                    "With --longest-context: the longest context tried")
        ->capture_default_str()
        ->check(CLI::PositiveNumber)
        ->group("Data");
    sub->add_option("--lengths", r.lengths,
                    "Document lengths: lognormal:median=M,sigma=S, long-tail:context=N, file:PATH "
                    "(default long-tail:context=C,median=min(1900, C/8))")
        ->group("Data");
    sub->add_option("--documents", r.documents,
                    "Documents to sample (default: enough for the steps played and one more)")
        ->group("Data");
    sub->add_option("--seed", r.seed)->capture_default_str()->group("Data");
    sub->add_option("--steps", r.steps, "Steps played per simulated candidate")
        ->capture_default_str()
        ->group("Data");

    sub->add_option("--schedules", args->schedules, "Pipeline schedules to try")
        ->capture_default_str()
        ->group("Search");
    sub->add_option("--virtual-stages", args->virtual_stages,
                    "Model chunks per stage to try under interleaved")
        ->capture_default_str()
        ->group("Search");
    sub->add_option("--balancers", args->balancers, "Balancers to try: fixed, ilp, wlb")
        ->capture_default_str()
        ->group("Search");
    sub->add_option("--cp-shards", args->shardings,
                    "CP shardings to try (cp > 1): contiguous, zigzag, per-doc, adaptive")
        ->capture_default_str()
        ->group("Search");
    sub->add_option("--recomputes", args->recomputes,
                    "Recomputation to try; the least that fits is kept")
        ->capture_default_str()
        ->group("Search");
    sub->add_flag("--no-sequence-parallel", args->no_sequence_parallel,
                  "Do not try sequence parallelism")
        ->group("Search");
    CLI::Option* zero =
        sub->add_option("--zero", args->zero_stages,
                        "ZeRO stages to try over each layout's DP x CP ranks, the least that fits "
                        "kept: 0 none, 1 (Megatron-LM's distributed optimizer) shards the "
                        "optimizer state, 2 also the gradients, 3 also the parameters; e.g. "
                        "1,2,3")
            ->capture_default_str()
            ->group("Search");
    sub->add_option("--cp-impls", args->cp_impls,
                    "How CP may split attention, each tried where cp > 1: all-gather, ulysses "
                    "(DeepSpeed-Ulysses' all-to-alls, where tp x cp divides the heads)")
        ->capture_default_str()
        ->group("Search");
    sub->add_flag("--no-distributed-optimizer", args->no_distributed_optimizer,
                  "Plan for a framework without Megatron-LM's distributed optimizer: --zero 0, "
                  "every rank holds and updates the whole optimizer state of its stage")
        ->excludes(zero)
        ->group("Search");
    add_attention_backend_option(*sub, args->attention_backend, "Search");
    sub->add_flag("--no-offload", args->no_offload,
                  "Do not try chunked attention with Q, K and V offloaded to host memory where "
                  "activations do not fit without recomputation")
        ->group("Search");
    sub->add_option("--attention-chunk", r.space.attention_chunk,
                    "The attention chunk offload is tried with (default min(65536, context / cp), "
                    "FPDT's balance of copies and compute on A100)")
        ->check(CLI::NonNegativeNumber)
        ->group("Search");
    sub->add_flag("--equal-split", args->equal_split,
                  "L/p layers a stage instead of the exact split (dynamic programming)")
        ->group("Search");
    sub->add_option("--max-tp", r.space.max_tp, "Largest TP (default: --gpus-per-node)")
        ->group("Search");
    sub->add_option("--max-pp", r.space.max_pp, "Largest PP (default: --layers)")->group("Search");
    sub->add_option("--max-cp", r.space.max_cp, "Largest CP (default: no limit)")->group("Search");
    sub->add_option(
           "--refine", r.refine_layouts,
           "Layouts of each world size played in full, best estimate first (default: max(4 x "
           "--top, 32))")
        ->group("Search");

    sub->add_option("--hot-switch", args->hot_switch,
                    "auto: also choose length buckets and a layout for each (HotSPa), play the "
                    "best specs and print the chosen one against the best static layout")
        ->group("Hot switching");
    sub->add_option("--hot-switch-buckets", args->hot_switch_options.max_buckets,
                    "Most buckets a chosen spec may have (2 to 4)")
        ->capture_default_str()
        ->group("Hot switching");
    sub->add_option("--hot-switch-play", args->hot_switch_options.played,
                    "Specs played in full, best estimate first")
        ->capture_default_str()
        ->check(CLI::PositiveNumber)
        ->group("Hot switching");

    sub->add_option("--top", r.top_k, "Candidates to print")
        ->capture_default_str()
        ->check(CLI::PositiveNumber)
        ->group("Output");
    sub->add_flag("--json", args->json, "Print the result as JSON")->group("Output");
    sub->add_option("-o,--output", args->output,
                    "Write the top candidates as simulated runs, DIR/rank-N.fulcrum")
        ->group("Output");
    sub->add_option("--report", args->report,
                    "Write the chart and the top candidates as a self-contained HTML page")
        ->group("Output");
    sub->add_flag("--force", args->force, "Replace existing runs in DIR and the --report FILE")
        ->group("Output");
    sub->add_flag("--progress", args->progress,
                  "Report progress on stderr even when it is not a terminal")
        ->group("Output");
    return [args] { return run_plan(*args); };
}

}  // namespace fulcrum::cli
