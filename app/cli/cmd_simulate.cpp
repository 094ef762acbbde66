// fulcrum simulate: predicts step time, imbalance and bubble of a 4D grid from a cost model
// (fitted on a captured run, given as JSON, or analytic), and writes the simulated run as a
// run database that every view and analysis opens. docs/simulate.md.
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <sstream>
#include <tuple>

#include "app/cli/cli_common.h"
#include "app/cli/commands.h"
#include "core/analysis/cost_model.h"
#include "core/analysis/run_trace.h"
#include "core/parallel/layout_flags.h"
#include "core/sim/hardware.h"
#include "core/sim/simulator.h"
#include "core/store/trace_reader.h"
#include "core/util/text_table.h"

namespace fulcrum::cli {
namespace {

struct SimulateArgs {
    CLI::App* command = nullptr;
    std::string output;
    bool force = false;
    sim::SimulationConfig defaults;  // fulcrum-train's defaults, overwritten by options
    std::string schedule = "1f1b";
    std::string recompute = "none";
    std::string dtype = "fp32";
    std::string overlap_grad_reduce = "off";
    std::string grad_reduce_dtype;  // "": fp16 under --dtype fp16, else fp32
    std::string hardware;
    std::string attention_backend = "flash";
    std::string compare_schedules;
    std::string stage_layers;
    std::string balancer = "fixed";
    std::string cp_shard = "per-doc";
    std::vector<std::string> calibrate;  // the first gives the settings; every one costs
    std::string cost_model;
    std::string compare;
    std::string hot_switch;
    int wlb_max_delay = -1;
    int host_cores = 0;  // when given: SimulationConfig::host_cores
    std::string wlb_thresholds = "tuned";
    std::string packing_cost = "model";
    bool json = false;
    bool progress = false;
};

bool given(const SimulateArgs& args, const std::string& option) {
    const CLI::Option* found = args.command->get_option_no_throw(option);
    return found != nullptr && found->count() > 0;
}

// The option that gives a run.config key (core/parallel/run_config.h): "cp_shard" → "--cp-shard".
std::string option_for_key(const std::string& key) {
    if (key == "microbatches") {
        return "--micro-batches";
    }
    std::string option = "--" + key;
    std::replace(option.begin(), option.end(), '_', '-');
    return option;
}

// RUN.fulcrum → RUN-wlb.fulcrum: one database per balancer of a comparison.
std::string output_for(const std::string& output, const std::string& balancer) {
    const std::filesystem::path path(output);
    std::filesystem::path named = path.parent_path() / (path.stem().string() + "-" + balancer);
    return named.string() + path.extension().string();
}

std::string command_line(const SimulateArgs& args) {
    std::string line = "fulcrum simulate";
    for (const CLI::Option* option : args.command->get_options()) {
        if (option->count() == 0 || option->get_lnames().empty() ||
            option->get_lnames().front() == "help") {
            continue;
        }
        line += " --" + option->get_lnames().front();
        for (const std::string& value : option->results()) {
            if (option->get_expected_min() > 0) {
                line += " " + value;
            }
        }
    }
    return line;
}

std::string fixed(double value, int decimals) {
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
    return buffer;
}

// --recompute, --dtype, --overlap-grad-reduce (the run's unless given), --grad-reduce-dtype (the
// run's or the dtype's rule unless given) and --hardware (a preset, then every analytic option
// given on the command line over it).
Status apply_knobs(const SimulateArgs& args, bool calibrated, sim::SimulationConfig& config) {
    if (!calibrated || given(args, "--recompute")) {
        auto recompute = parallel::parse_recompute(args.recompute);
        if (!recompute) {
            return Error{ErrorCode::invalid_input, "--recompute: " + recompute.error().message};
        }
        config.layout.recompute = *recompute;
    }
    if (!calibrated || given(args, "--dtype")) {
        auto dtype = sim::parse_dtype(args.dtype);
        if (!dtype) {
            return dtype.error();
        }
        config.dtype = *dtype;
    }
    if (given(args, "--grad-reduce-dtype")) {
        auto dtype = sim::parse_dtype(args.grad_reduce_dtype);
        if (!dtype) {
            return dtype.error();
        }
        config.grad_reduce_dtype = *dtype;
    }
    if (!calibrated || given(args, "--overlap-grad-reduce")) {
        config.overlap_grad_reduce = args.overlap_grad_reduce == "on";
    }
    if (!args.hardware.empty()) {
        auto preset = sim::hardware_preset(args.hardware);
        if (!preset) {
            return preset.error();
        }
        const sim::HardwareAssumptions& options = args.defaults.hardware;
        const auto keep = [&](const char* option, auto& field, const auto& value) {
            if (given(args, option)) {
                field = value;
            }
        };
        // Links given as flat bandwidths and a latency describe no network for NCCL's model.
        if (given(args, "--nvlink-gbs") || given(args, "--network-gbs") ||
            given(args, "--latency-us")) {
            preset->network.reset();
        }
        keep("--tflops", preset->tflops, options.tflops);
        keep("--nvlink-gbs", preset->nvlink_gbs, options.nvlink_gbs);
        keep("--network-gbs", preset->network_gbs, options.network_gbs);
        keep("--latency-us", preset->collective_latency_us, options.collective_latency_us);
        keep("--gpus-per-node", preset->gpus_per_node, options.gpus_per_node);
        config.hardware = *preset;
    }
    if (given(args, "--attention-backend")) {
        config.hardware.unfused_attention = args.attention_backend == "unfused";
    }
    return {};
}

// The lengths of the documents a run trained, from its workload table: each (step, document)
// once, in the order the run trained them (step, micro-batch, document); empty without one.
std::vector<std::int64_t> trained_documents(const analysis::RunTrace& trace) {
    struct Trained {
        std::int32_t step, microbatch;
        std::int64_t doc_id, length;
    };
    std::vector<Trained> documents;
    for (const WorkloadEntry& row : trace.workload) {
        if (row.doc_length > 0) {
            documents.push_back({row.step, row.microbatch, row.doc_id, row.doc_length});
        }
    }
    const auto key = [](const Trained& t) { return std::tie(t.step, t.microbatch, t.doc_id); };
    std::sort(documents.begin(), documents.end(),
              [&](const Trained& a, const Trained& b) { return key(a) < key(b); });
    std::vector<std::int64_t> lengths;
    std::set<std::pair<std::int32_t, std::int64_t>> seen;  // (step, document)
    for (const Trained& t : documents) {
        if (seen.emplace(t.step, t.doc_id).second) {
            lengths.push_back(t.length);
        }
    }
    return lengths;
}

// The settings: the calibration run's where it says them, the command line's where given,
// fulcrum-train's defaults otherwise.
Result<sim::SimulationConfig> build_config(const SimulateArgs& args,
                                           const analysis::RunTrace* trace) {
    sim::SimulationConfig config = args.defaults;
    if (trace != nullptr) {
        auto settings = sim::config_from_run(*trace);
        if (!settings) {
            return settings.error();
        }
        const sim::SimulationConfig& run = settings->config;
        const auto keep = [&](const char* option, auto& field, const auto& value) {
            if (!given(args, option)) {
                field = value;
            }
        };
        keep("--layers", config.model.layers, run.model.layers);
        keep("--hidden", config.model.hidden, run.model.hidden);
        keep("--heads", config.model.heads, run.model.heads);
        keep("--context", config.model.context, run.model.context);
        keep("--vocab", config.model.vocab, run.model.vocab);
        keep("--architecture", config.model.architecture, run.model.architecture);
        keep("--kv-heads", config.model.kv_heads, run.model.kv_heads);
        keep("--ffn-hidden", config.model.ffn_hidden, run.model.ffn_hidden);
        if (!given(args, "--zero") && !given(args, "--distributed-optimizer")) {
            config.layout.zero_stage = run.layout.zero_stage;
        }
        keep("--cp-impl", config.layout.context_parallelism, run.layout.context_parallelism);
        keep("--offload-checkpoints", config.layout.offload_checkpoints,
             run.layout.offload_checkpoints);
        keep("--tp-comm-overlap", config.tp_comm_overlap, run.tp_comm_overlap);
        keep("--overlap-param-gather", config.overlap_param_gather, run.overlap_param_gather);
        keep("--attention-mask", config.packed_attention, run.packed_attention);
        if (!given(args, "--attention-chunk") && !given(args, "--offload")) {
            config.attention_chunk = run.attention_chunk;
            config.offload = run.offload;
        }
        keep("--dp", config.layout.grid.dp, run.layout.grid.dp);
        keep("--tp", config.layout.grid.tp, run.layout.grid.tp);
        keep("--pp", config.layout.grid.pp, run.layout.grid.pp);
        keep("--cp", config.layout.grid.cp, run.layout.grid.cp);
        keep("--micro-batches", config.layout.microbatches, run.layout.microbatches);
        if (!given(args, "--steps") && !given(args, "--epochs")) {
            config.steps = run.steps;
            config.epochs = run.epochs;
        }
        keep("--lengths", config.lengths, run.lengths);
        keep("--documents", config.documents, run.documents);
        if (config.lengths.empty() && !given(args, "--lengths")) {
            // A run trained on text records no length spec: replay the documents it trained.
            config.document_lengths = trained_documents(*trace);
            if (!config.document_lengths.empty()) {
                warn("'" + args.calibrate.front() + "' records no --lengths; replaying the " +
                     std::to_string(config.document_lengths.size()) +
                     " documents it trained (its workload table), in the order it trained them");
            }
        }
        keep("--seed", config.seed, run.seed);
        keep("--attention-kernel", config.attention_kernel, run.attention_kernel);
        keep("--wlb-max-tokens", config.wlb_max_tokens, run.wlb_max_tokens);
        config.wlb_max_delay = run.wlb_max_delay;    // --wlb-max-delay and --wlb-thresholds,
        config.wlb_thresholds = run.wlb_thresholds;  // when given, win in run_simulate
        keep("--ilp-window", config.ilp_window, run.ilp_window);
        config.layout.schedule = run.layout.schedule;
        config.balancer = run.balancer;
        config.sharding = run.sharding;
        keep("--virtual-stages", config.layout.virtual_stages, run.layout.virtual_stages);
        keep("--sequence-parallel", config.layout.sequence_parallel, run.layout.sequence_parallel);
        config.layout.recompute = run.layout.recompute;
        config.dtype = run.dtype;
        config.grad_reduce_dtype = run.grad_reduce_dtype;
        config.overlap_grad_reduce = run.overlap_grad_reduce;
        // Required settings it lacks are validate()'s to name; the rest fall back, and say so.
        std::string defaulted;
        for (const std::string& key : settings->unknown) {
            const std::string option = option_for_key(key);
            const bool required = option == "--layers" || option == "--hidden" ||
                                  option == "--context" || option == "--micro-batches" ||
                                  option == "--lengths";
            if (!required && !given(args, option)) {
                defaulted += (defaulted.empty() ? "" : ", ") + option;
            }
        }
        if (!defaulted.empty()) {
            warn("'" + args.calibrate.front() + "' does not say its " + defaulted +
                 "; using the defaults (see --help)");
        }
    } else if (!given(args, "--lengths")) {
        // A ProLong-like median of 1,900 tokens (docs/sources.md, "Document lengths"), or
        // context/8 where that would leave hardly a document shorter than the context
        // (fulcrum-train's demo mix).
        const int median = std::max(1, std::min(1900, config.model.context / 8));
        config.lengths = "long-tail:context=" + std::to_string(config.model.context) +
                         ",median=" + std::to_string(median);
    }
    if (given(args, "--steps")) {
        config.epochs = 0;
    } else if ((!args.compare.empty() || !args.hot_switch.empty()) && !given(args, "--epochs")) {
        // A comparison of balancers is fair only over the same documents: one epoch, each
        // trained once.
        config.epochs = 1;
    }
    if (trace == nullptr || given(args, "--schedule")) {
        auto schedule = parallel::parse_schedule(args.schedule);
        if (!schedule) {
            return schedule.error();
        }
        config.layout.schedule = *schedule;
    }
    if (trace == nullptr || given(args, "--rank-order")) {
        config.layout.rank_order = args.defaults.layout.rank_order;
    }
    if (auto status = apply_knobs(args, trace != nullptr, config); !status) {
        return status.error();
    }
    if (!args.stage_layers.empty()) {
        auto split = parse_int_list(args.stage_layers, "--stage-layers", "4,8,8,4");
        if (!split) {
            return split.error();
        }
        config.layout.stage_layers = std::move(*split);
    }
    if (!args.hot_switch.empty()) {
        auto spec =
            parallel::parse_hot_switch_spec(args.hot_switch, {.world = config.layout.grid.world(),
                                                              .heads = config.model.heads,
                                                              .layers = config.model.layers});
        if (!spec) {
            return spec.error();
        }
        config.hot_switch = std::move(*spec);
    }
    if (trace == nullptr || given(args, "--balancer")) {
        auto balancer = balance::parse_balancer(args.balancer);
        if (!balancer) {
            return balancer.error();
        }
        config.balancer = *balancer;
    }
    if (trace == nullptr || given(args, "--cp-shard")) {
        auto sharding = balance::parse_cp_sharding(args.cp_shard);
        if (!sharding) {
            return sharding.error();
        }
        config.sharding = *sharding;
    }
    return config;
}

// Per token and per causal pair, summed over a step's passes (every stage, both phases).
balance::PackingCost packing_cost_of(const analysis::CostModel& model) {
    double per_token = 0;
    double per_pair = 0;
    for (const analysis::PassCost& pass : model.passes) {
        per_token += pass.per_token_ns;
        per_pair += pass.per_pair_ns;
    }
    return balance::PackingCost::from_fit(per_token, per_pair);
}

// --packing-cost: the model's FLOPs, the fitted time model of --calibrate / --cost-model,
// or a cost model file.
Status set_packing_cost(const SimulateArgs& args, sim::SimulationConfig& config) {
    config.packing_cost_source = args.packing_cost;
    if (args.packing_cost == "model") {
        config.packing_cost.reset();
        return {};
    }
    if (args.packing_cost == "fitted") {
        if (!config.cost_model) {
            return Error{ErrorCode::invalid_input,
                         "--packing-cost fitted needs a fitted cost model: give --calibrate RUN "
                         "or --cost-model FILE.json"};
        }
        config.packing_cost = packing_cost_of(*config.cost_model);
        return {};
    }
    auto model = read_cost_model(args.packing_cost);
    if (!model) {
        return Error{model.error().code,
                     "--packing-cost takes model, fitted or a cost model "
                     "file: " +
                         model.error().message};
    }
    config.packing_cost = packing_cost_of(*model);
    return {};
}

// One simulation of a comparison: its settings and the name of what differs.
struct Variant {
    sim::SimulationConfig config;
    std::string label;  // the balancer's or schedule's name
};

// The variants a comma-separated `list` names, each made by `make` from its name, in order and
// without repeats; `option` and `example` go into the messages.
Result<std::vector<Variant>> parse_variants(
    const std::string& list, const std::string& option, const std::string& example,
    const std::function<Result<Variant>(const std::string&)>& make) {
    std::vector<Variant> variants;
    std::stringstream items(list);
    std::string name;
    while (std::getline(items, name, ',')) {
        auto variant = make(name);
        if (!variant) {
            return Error{ErrorCode::invalid_input, option + ": " + variant.error().message};
        }
        const bool seen = std::any_of(variants.begin(), variants.end(),
                                      [&](const Variant& v) { return v.label == variant->label; });
        if (!seen) {
            variants.push_back(std::move(*variant));
        }
    }
    if (variants.empty()) {
        return Error{ErrorCode::invalid_input, option + " needs a list, e.g. " + example};
    }
    return variants;
}

Result<std::vector<Variant>> schedules_to_play(const SimulateArgs& args,
                                               const sim::SimulationConfig& config) {
    return parse_variants(
        args.compare_schedules, "--compare-schedules", "--compare-schedules 1f1b,interleaved,zb-h1",
        [&](const std::string& name) -> Result<Variant> {
            auto schedule = parallel::parse_schedule(name);
            if (!schedule) {
                return schedule.error();
            }
            Variant variant{config, parallel::schedule_name(*schedule)};
            variant.config.layout.schedule = *schedule;
            const bool interleaved = *schedule == parallel::PipelineSchedule::interleaved;
            variant.config.layout.virtual_stages =
                interleaved ? std::max(config.layout.virtual_stages, 2) : 1;
            if (auto status = sim::validate(variant.config); !status) {
                return Error{ErrorCode::invalid_input,
                             variant.label + ": " + status.error().message};
            }
            return variant;
        });
}

Result<std::vector<Variant>> variants_to_play(const SimulateArgs& args,
                                              const sim::SimulationConfig& config) {
    if (!args.compare.empty() && !args.compare_schedules.empty()) {
        return Error{ErrorCode::invalid_input,
                     "compare balancers (--compare) or schedules (--compare-schedules), not both"};
    }
    if (!args.compare_schedules.empty()) {
        return schedules_to_play(args, config);
    }
    if (config.hot_switch) {
        // The hot-switched run against the static layout (--dp, --tp, --pp, --cp) on the same
        // documents.
        if (!args.compare.empty()) {
            return Error{ErrorCode::invalid_input,
                         "--hot-switch compares against the static layout; leave out --compare"};
        }
        Variant fixed_layout{config, "static " + parallel::layout_string(config.layout.grid)};
        fixed_layout.config.hot_switch.reset();
        return std::vector<Variant>{std::move(fixed_layout), {config, "hot-switch"}};
    }
    if (args.compare.empty()) {
        return std::vector<Variant>{{config, balance::balancer_name(config.balancer)}};
    }
    return parse_variants(args.compare, "--compare", "--compare fixed,ilp,wlb",
                          [&](const std::string& name) -> Result<Variant> {
                              auto balancer = balance::parse_balancer(name);
                              if (!balancer) {
                                  return balancer.error();
                              }
                              Variant variant{config, balance::balancer_name(*balancer)};
                              variant.config.balancer = *balancer;
                              return variant;
                          });
}

struct Played {
    balance::Balancer balancer;
    sim::SimulationResult result;
    std::string output;
    std::string label;
    parallel::PipelineSchedule schedule = parallel::PipelineSchedule::one_f_one_b;
    int virtual_stages = 1;
};

nlohmann::json steps_json(const sim::SimulationResult& result) {
    nlohmann::json steps = nlohmann::json::array();
    for (const sim::SimulatedStep& step : result.steps) {
        steps.push_back({{"step", step.step},
                         {"epoch", step.epoch},
                         {"start_ns", step.start_ns},
                         {"duration_ns", step.duration_ns},
                         {"imbalance", step.imbalance},
                         {"bubble_fraction", step.bubble_fraction},
                         {"tokens", step.tokens},
                         {"microbatches", step.microbatches}});
    }
    return steps;
}

// A hot-switched run's buckets and switches, summed over its steps.
nlohmann::json hot_switch_json(const sim::SimulationResult& result) {
    nlohmann::json buckets = nlohmann::json::array();
    for (const sim::SimulatedBucket& b : result.buckets) {
        buckets.push_back({{"bounds", parallel::bucket_bounds_string(b.bucket)},
                           {"layout", parallel::layout_string(b.bucket.layout)},
                           {"documents", b.documents},
                           {"tokens", b.tokens},
                           {"microbatches", b.microbatches},
                           {"ns", b.ns},
                           {"reduction_ns", b.reduction_ns}});
    }
    nlohmann::json switches = nlohmann::json::array();
    for (const sim::SimulatedSwitch& c : result.switches) {
        switches.push_back({{"from", parallel::layout_string(c.from)},
                            {"to", parallel::layout_string(c.to)},
                            {"count", c.count},
                            {"bytes", c.bytes},
                            {"largest_send_bytes", c.largest_send_bytes},
                            {"ns", c.ns}});
    }
    return {{"buckets", std::move(buckets)},
            {"switches", std::move(switches)},
            {"update_ns", result.update_ns}};
}

void print_json(const sim::SimulationConfig& config, const std::vector<Played>& played) {
    nlohmann::json out;
    out["format"] = "fulcrum simulate";
    out["version"] = 1;
    out["config"] =
        nlohmann::json::parse(sim::run_config_json(config, played.front().result.cost_source));
    out["config"].erase("balancer");
    const analysis::CostModel model =
        config.cost_model ? *config.cost_model
                          : sim::analytic_cost_model(config.model, config.layout, config.hardware,
                                                     config.dtype, sim::gemm_chunks(config));
    out["cost_model"] = nlohmann::json::parse(analysis::cost_model_json(model));
    out["notes"] = played.front().result.notes;
    nlohmann::json results = nlohmann::json::array();
    const double first = played.front().result.mean_step_ns;
    const double first_rate = played.front().result.tokens_per_second;
    for (const Played& run : played) {
        const sim::SimulationResult& r = run.result;
        results.push_back(
            {{"balancer", balance::balancer_name(run.balancer)},
             {"schedule", parallel::schedule_name(run.schedule)},
             {"virtual_stages", run.virtual_stages},
             {"mean_step_ns", r.mean_step_ns},
             {"vs_first", first > 0 ? r.mean_step_ns / first : 1.0},
             {"mean_imbalance", r.mean_imbalance},
             {"mean_bubble_fraction", r.mean_bubble_fraction},
             {"tokens_per_second", r.tokens_per_second},
             {"tokens", r.tokens},
             {"tokens_per_s", r.tokens_per_second},
             {"tokens_per_s_vs_first", first_rate > 0 ? r.tokens_per_second / first_rate : 1.0},
             {"documents", r.documents},
             {"epochs", r.epochs},
             {"mean_delay_steps", r.mean_delay_steps},
             {"max_delay_steps", r.max_delay_steps},
             {"wlb",
              {{"max_tokens", r.packing.wlb_max_tokens},
               {"max_delay", r.packing.wlb_max_delay ? *r.packing.wlb_max_delay : -1},
               {"thresholds", r.packing.wlb_thresholds.value_or(std::vector<std::int64_t>{})},
               {"tuned", r.wlb_tuning.has_value()}}},
             {"packing_cost",
              {{"linear", r.packing.cost.linear}, {"attention", r.packing.cost.attention}}},
             {"cp_sharding",
              {{"per_document_microbatches", r.per_document_microbatches},
               {"zigzag_microbatches", r.zigzag_microbatches}}},
             {"ranks", r.ranks},
             {"output", run.output.empty() ? nlohmann::json(nullptr) : nlohmann::json(run.output)},
             {"events", r.events},
             {"workload_rows", r.workload_rows},
             {"steps", steps_json(r)}});
        if (!r.buckets.empty()) {
            results.back()["hot_switch"] = hot_switch_json(r);
        }
    }
    out["results"] = results;
    std::printf("%s\n", out.dump(2).c_str());
}

// Balancers compared over the same documents (--epochs) differ in how many steps they take,
// so the ratio that matters is tokens/s; by steps, they train different tokens, and the
// table says so.
void print_table(const sim::SimulationConfig& config, const std::vector<Played>& played,
                 const std::string& compared) {
    const sim::SimulationResult& head = played.front().result;
    const std::string length = config.epochs > 0 ? std::to_string(config.epochs) + " epoch(s)"
                                                 : std::to_string(config.steps) + " steps";
    std::printf("simulated %s = %d ranks, %s, %d micro-batches per replica, %s\n",
                parallel::describe(config.layout.grid).c_str(), config.layout.grid.world(),
                parallel::schedule_name(config.layout.schedule), config.layout.microbatches,
                length.c_str());
    std::printf("model: %s\n", parallel::describe_model(config.model).c_str());
    if (!config.document_lengths.empty()) {
        std::printf("documents: %zu of given lengths; CP sharding %s\n",
                    config.document_lengths.size(), balance::cp_sharding_name(config.sharding));
    } else {
        std::printf("documents: %s, %lld documents, seed %llu; CP sharding %s\n",
                    config.lengths.c_str(), static_cast<long long>(config.documents),
                    static_cast<unsigned long long>(config.seed),
                    balance::cp_sharding_name(config.sharding));
    }
    std::printf("cost model: %s\n", head.cost_source.c_str());
    for (const std::string& note : head.notes) {
        std::printf("  derived: %s\n", note.c_str());
    }
    std::printf("\n");
    using Align = TextTable::Align;
    const std::string first_name = played.front().label;
    TextTable table({compared, "steps", "step time", "tokens", "tokens/s", "vs " + first_name,
                     "imbalance", "bubble", "delay mean", "delay max"},
                    {Align::left, Align::right, Align::right, Align::right, Align::right,
                     Align::right, Align::right, Align::right, Align::right, Align::right});
    const double first = head.tokens_per_second;
    for (const Played& run : played) {
        const sim::SimulationResult& r = run.result;
        table.add_row({run.label, std::to_string(r.steps.size()),
                       format_duration(std::llround(r.mean_step_ns)), std::to_string(r.tokens),
                       fixed(r.tokens_per_second, 0),
                       fixed(first > 0 ? r.tokens_per_second / first : 1.0, 2) + "x",
                       fixed(r.mean_imbalance, 2), fixed(100 * r.mean_bubble_fraction, 1) + "%",
                       fixed(r.mean_delay_steps, 2), std::to_string(r.max_delay_steps)});
    }
    std::fputs(table.render().c_str(), stdout);
    for (const Played& run : played) {
        if (run.balancer != balance::Balancer::wlb) {
            continue;
        }
        const balance::PackingOptions& packing = run.result.packing;
        std::printf(
            "wlb: S_max %lld tokens%s, max delay %s, thresholds %s",
            static_cast<long long>(packing.wlb_max_tokens),
            config.wlb_max_tokens > 0
                ? ""
                : (" (memory model, " + fixed(config.gpu_memory_gib, 0) + " GiB)").c_str(),
            packing.wlb_max_delay ? std::to_string(*packing.wlb_max_delay).c_str() : "unbounded",
            balance::wlb_thresholds_text(packing.wlb_thresholds).c_str());
        if (const auto& tuning = run.result.wlb_tuning) {
            std::printf(" (tuned on the first epoch: imbalance %.2f, mean delay %.2f steps)",
                        tuning->replay.mean_imbalance, tuning->replay.mean_delay_iterations);
        }
        std::printf("\n");
    }
    std::printf(
        "packing cost: %s, a document's attention equals its linear work at %.0f "
        "tokens\n",
        config.packing_cost_source.c_str(),
        head.packing.cost.attention > 0 ? head.packing.cost.linear / head.packing.cost.attention
                                        : 0.0);
    if (config.sharding == balance::CpSharding::adaptive && config.layout.grid.cp > 1) {
        for (const Played& run : played) {
            std::printf(
                "adaptive cp sharding, %s (%s kernel model): %lld micro-batches per "
                "document, %lld per sequence\n",
                balance::balancer_name(run.balancer), config.attention_kernel.c_str(),
                static_cast<long long>(run.result.per_document_microbatches),
                static_cast<long long>(run.result.zigzag_microbatches));
        }
    }
    if (played.size() > 1) {
        if (config.epochs > 0) {
            std::printf(
                "every balancer trained the same %lld documents, %s; 'vs %s' is "
                "tokens/s against it; delays in steps, token-weighted mean\n",
                static_cast<long long>(head.documents), length.c_str(), first_name.c_str());
        } else {
            std::printf(
                "by steps the balancers train different documents: 'vs %s' is tokens/s "
                "against it; use --epochs to compare on the same documents\n",
                first_name.c_str());
        }
    }
    for (const Played& run : played) {
        if (!run.output.empty()) {
            std::printf("wrote %s (%d ranks, %lld events, %lld workload rows)\n",
                        run.output.c_str(), run.result.ranks,
                        static_cast<long long>(run.result.events),
                        static_cast<long long>(run.result.workload_rows));
        }
    }
}

// A hot-switched run's buckets and switches, summed over its steps (HotSPa, SOSP'24, Table 3's
// layout: a row per bucket, 'others' the switching).
void print_hot_switch(const sim::SimulationResult& result) {
    if (result.buckets.empty()) {
        return;
    }
    double total = result.update_ns;
    for (const sim::SimulatedBucket& bucket : result.buckets) {
        total += bucket.ns;
    }
    for (const sim::SimulatedSwitch& change : result.switches) {
        total += change.ns;
    }
    const auto share = [&](double ns) { return fixed(total > 0 ? 100 * ns / total : 0, 1) + "%"; };
    using Align = TextTable::Align;
    TextTable buckets({"bucket", "layout", "documents", "tokens", "micro-batches", "time", "share"},
                      {Align::left, Align::left, Align::right, Align::right, Align::right,
                       Align::right, Align::right});
    for (const sim::SimulatedBucket& bucket : result.buckets) {
        buckets.add_row({parallel::bucket_bounds_string(bucket.bucket),
                         parallel::layout_string(bucket.bucket.layout),
                         std::to_string(bucket.documents), std::to_string(bucket.tokens),
                         std::to_string(bucket.microbatches),
                         format_duration(std::llround(bucket.ns)), share(bucket.ns)});
    }
    double switching = 0;
    for (const sim::SimulatedSwitch& change : result.switches) {
        switching += change.ns;
    }
    buckets.add_row({"others (switching)", "", "", "", "", format_duration(std::llround(switching)),
                     share(switching)});
    buckets.add_row({"optimizer (at home)", "", "", "", "",
                     format_duration(std::llround(result.update_ns)), share(result.update_ns)});
    std::printf("\nhot switching, over %zu steps:\n", result.steps.size());
    std::fputs(buckets.render().c_str(), stdout);
    TextTable switches({"switch", "count", "bytes each", "largest send", "time each"},
                       {Align::left, Align::right, Align::right, Align::right, Align::right});
    for (const sim::SimulatedSwitch& change : result.switches) {
        const double count = std::max(change.count, 1);
        switches.add_row(
            {parallel::layout_string(change.from) + " -> " + parallel::layout_string(change.to),
             std::to_string(change.count), format_bytes(std::llround(change.bytes / count)),
             format_bytes(std::llround(change.largest_send_bytes)),
             format_duration(std::llround(change.ns / count))});
    }
    std::fputs(switches.render().c_str(), stdout);
}

int run_simulate(const SimulateArgs& args) {
    std::atomic<bool> cancel{false};
    if (given(args, "--epochs") && args.defaults.epochs < 1) {
        return report_error({ErrorCode::invalid_input, "--epochs must be at least 1, not " +
                                                           std::to_string(args.defaults.epochs)});
    }
    if (given(args, "--wlb-max-delay") && args.wlb_max_delay < 0) {
        return report_error(
            {ErrorCode::invalid_input, "--wlb-max-delay must be at least 0 steps, not " +
                                           std::to_string(args.wlb_max_delay)});
    }
    const auto thresholds = balance::parse_wlb_thresholds(args.wlb_thresholds);
    if (!thresholds) {
        return report_error(thresholds.error());
    }
    std::vector<CalibrationRun> runs;
    for (const std::string& path : args.calibrate) {
        auto loaded = load_calibration_run(path, args.progress, cancel);
        if (!loaded) {
            return report_error(loaded.error());
        }
        runs.push_back(std::move(*loaded));
    }
    const analysis::RunTrace* trace = runs.empty() ? nullptr : &runs.front().run;
    auto config = build_config(args, trace);
    if (!config) {
        return report_error(config.error());
    }
    if (given(args, "--host-cores")) {
        config->host_cores = args.host_cores;
    }
    if (given(args, "--wlb-max-delay")) {
        config->wlb_max_delay = args.wlb_max_delay;
    }
    if (trace == nullptr || given(args, "--wlb-thresholds")) {
        config->wlb_thresholds = *thresholds;
    }
    // The settings first: a run that cannot be simulated need not be fitted.
    if (auto status = sim::validate(*config); !status) {
        return report_error(status.error());
    }
    if (!args.cost_model.empty()) {
        auto model = read_cost_model(args.cost_model);
        if (!model) {
            return report_error(model.error());
        }
        config->cost_model = std::move(*model);
    } else if (!runs.empty()) {
        auto calibrations = calibrate_runs(runs, args.calibrate);
        if (!calibrations) {
            return report_error(calibrations.error());
        }
        // Several runs: each cost from the one nearest this grid that ran it.
        sim::Calibration merged = sim::merge_calibrations(
            *calibrations, args.calibrate, config->layout.grid, config->layout.sequence_parallel);
        config->cost_model = std::move(merged.model);
        config->cost_origin = merged.origin;
        config->calibrations = std::move(*calibrations);
        config->calibration_names = args.calibrate;
    }
    if (auto status = set_packing_cost(args, *config); !status) {
        return report_error(status.error());
    }
    if (auto status = sim::validate(*config); !status) {
        return report_error(status.error());
    }
    auto variants = variants_to_play(args, *config);
    if (!variants) {
        return report_error(variants.error());
    }
    const bool comparing = variants->size() > 1;
    // Every output is checked before anything is simulated, so a comparison does not stop
    // half-way on the third file.
    std::vector<std::string> outputs;
    for (const Variant& variant : *variants) {
        std::string path;
        if (!args.output.empty()) {
            path = comparing
                       ? output_for(args.output, variant.config.hot_switch || !config->hot_switch
                                                     ? variant.label
                                                     : "static")
                       : args.output;
            std::error_code ec;
            if (!args.force && std::filesystem::exists(path, ec)) {
                return report_error({ErrorCode::io, "'" + path +
                                                        "' already exists; remove it, choose "
                                                        "another path, or pass --force"});
            }
        }
        outputs.push_back(path);
    }

    std::vector<Played> played;
    const std::string command = command_line(args);
    for (std::size_t i = 0; i < variants->size(); ++i) {
        const sim::SimulationConfig& run = (*variants)[i].config;
        sim::SimulationProgress progress;
        progress.progress =
            progress_for("simulating " + (*variants)[i].label, args.progress, cancel);
        progress.cancel = &cancel;
        Result<sim::SimulationResult> result =
            outputs[i].empty() ? sim::simulate(run, nullptr, progress) : [&] {
                sim::SimulationOutput output;
                output.path = outputs[i];
                output.overwrite = args.force;
                output.command = command;
                output.producer = "fulcrum " FULCRUM_VERSION;
                return sim::simulate_to_file(run, output, progress);
            }();
        finish_progress_line();
        if (!result) {
            return report_error(result.error());
        }
        played.push_back({run.balancer, std::move(*result), outputs[i], (*variants)[i].label,
                          run.layout.schedule, run.layout.virtual_stages});
    }
    if (args.json) {
        print_json(*config, played);
    } else {
        print_table(*config, played,
                    config->hot_switch               ? "layout"
                    : args.compare_schedules.empty() ? "balancer"
                                                     : "schedule");
        for (const Played& run : played) {
            print_hot_switch(run.result);
        }
    }
    return kExitOk;
}

// The options, by the groups --help shows them in.
void add_output_options(CLI::App* sub, SimulateArgs* args) {
    sub->add_option("-o,--output", args->output,
                    "Write the simulated run here (with --compare: RUN-<balancer>.fulcrum per "
                    "balancer); without it, only the table is printed")
        ->group("Output");
    sub->add_flag("--force", args->force, "Replace existing output files")->group("Output");
    sub->add_flag("--json", args->json,
                  "Print the results as JSON (config, cost model, per-step figures)")
        ->group("Output");
    sub->add_flag("--progress", args->progress,
                  "Report progress on stderr even when it is not a terminal")
        ->group("Output");
}

void add_cost_model_options(CLI::App* sub, SimulateArgs* args) {
    sim::SimulationConfig& d = args->defaults;
    sub->add_option("--calibrate", args->calibrate,
                    "Fit the cost model on this captured run, and take every setting not given "
                    "here from its configuration. Repeat it to fit each cost on the run nearest "
                    "the simulated layout that ran it (e.g. a pp2, a tp2, a cp2 and a dp2 run); "
                    "the first gives the settings")
        ->group("Cost model");
    sub->add_option("--cost-model", args->cost_model,
                    "A cost model as JSON (the cost_model member of fulcrum analyze --json; "
                    "docs/analyses.md); overrides the fit of --calibrate")
        ->group("Cost model");
    sub->add_option("--hardware", args->hardware,
                    "A system description for the analytic model: h100 (989 TFLOP/s peak, GEMM "
                    "efficiency by size, DGX H100's links), a100 (312 TFLOP/s peak, GEMM "
                    "efficiency by size, DGX A100's links), or a JSON file of your system "
                    "(docs/simulate.md, "
                    "\"A system of your own\"); collectives priced as NCCL prices them; the "
                    "options below override its values")
        ->group("Cost model");
    sub->add_option("--tflops", d.hardware.tflops,
                    "Analytic model: sustained TFLOP/s per GPU (used when no cost model is "
                    "given, and for what a given one lacks)")
        ->capture_default_str()
        ->group("Cost model");
    sub->add_option("--nvlink-gbs", d.hardware.nvlink_gbs,
                    "Analytic model: GB/s of collectives within a node")
        ->capture_default_str()
        ->group("Cost model");
    sub->add_option("--network-gbs", d.hardware.network_gbs,
                    "Analytic model: GB/s per GPU between nodes")
        ->capture_default_str()
        ->group("Cost model");
    sub->add_option("--latency-us", d.hardware.collective_latency_us,
                    "Analytic model: latency of one collective call, in microseconds")
        ->capture_default_str()
        ->group("Cost model");
    parallel::add_rank_order_flag(*sub, d.layout.rank_order, ", or the calibration run's",
                                  "Cost model");
    sub->add_option("--gpus-per-node", d.hardware.gpus_per_node,
                    "Analytic model: GPUs per node (groups within one use NVLink)")
        ->capture_default_str()
        ->check(CLI::PositiveNumber)
        ->group("Cost model");
    sub->add_option("--host-cores", args->host_cores,
                    "Cores of a host whose ranks share them (the CPU backend with more ranks "
                    "than cores): a computing rank runs at min(1, cores / computing ranks) of a "
                    "core (docs/simulate.md, \"Ranks that share cores\"). Default: the "
                    "calibration run's; 0: a core or device a rank")
        ->check(CLI::NonNegativeNumber)
        ->group("Cost model");
    sub->add_option("--ranks-per-host", d.ranks_per_host,
                    "With --host-cores: ranks of each host (0: the whole world on one)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber)
        ->group("Cost model");
}

void add_model_options(CLI::App* sub, sim::SimulationConfig& d) {
    parallel::add_model_flags(*sub, d.model, /*vocab=*/true, "Model");
}

void add_grid_options(CLI::App* sub, SimulateArgs* args) {
    sim::SimulationConfig& d = args->defaults;
    parallel::add_grid_flags(*sub, d.layout.grid, "Grid");
    parallel::add_pipeline_flags(*sub,
                                 {.microbatches = d.layout.microbatches,
                                  .schedule = args->schedule,
                                  .virtual_stages = d.layout.virtual_stages,
                                  .stage_layers = args->stage_layers,
                                  .recompute = args->recompute,
                                  .sequence_parallel = d.layout.sequence_parallel},
                                 "Grid");
    sub->add_option("--compare-schedules", args->compare_schedules,
                    "Simulate each of these pipeline schedules with otherwise identical settings, "
                    "e.g. 1f1b,interleaved,zb-h1 (interleaved with --virtual-stages, 2 if not "
                    "given); the first is the baseline of the 'vs' column")
        ->group("Grid");
    sub->add_flag("--pipeline-scatter-gather", d.pipeline_scatter_gather,
                  "Megatron-LM's pipeline sends: each TP rank sends 1/tp of the boundary "
                  "activation (fulcrum-train sends it whole)")
        ->group("Grid");
    sub->add_flag("--tp-comm-overlap", d.tp_comm_overlap,
                  "Megatron-LM's --tp-comm-overlap: sequence parallelism's all-gathers and "
                  "reduce-scatters chunked and sent while the GEMMs beside them compute (needs "
                  "--sequence-parallel)")
        ->group("Grid");
    add_tp_backward_overlap_flag(*sub, d.tp_backward_overlap, "Grid");
    parallel::add_memory_technique_flags(*sub, d.layout, "Grid");
    sub->add_option("--attention-chunk", d.attention_chunk,
                    "FPDT's chunked attention: each layer's sequence in chunks of this many "
                    "tokens (0: whole)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber)
        ->group("Grid");
    sub->add_option_function<std::string>(
           "--offload", [&d](const std::string& value) { d.offload = value == "on"; },
           "With --attention-chunk: each chunk's Q, K and V to pinned host memory and the "
           "earlier chunks' K and V back for each chunk's attention (on), priced over the "
           "hardware's host link; or kept on the device (off, the default)")
        ->check(CLI::IsMember({"on", "off"}))
        ->group("Grid");
    add_attention_backend_option(*sub, args->attention_backend, "Cost model");
    add_attention_mask_option(*sub, d.packed_attention, "Cost model");
    sub->add_option("--dtype", args->dtype,
                    "Element type of activations and parameters: bf16, fp16 (2 bytes) or fp32 "
                    "(4, the CPU engine's); gradients: --grad-reduce-dtype")
        ->capture_default_str()
        ->group("Grid");
    add_grad_reduce_dtype_option(*sub, args->grad_reduce_dtype, "Grid");
    sub->add_option("--overlap-grad-reduce", args->overlap_grad_reduce,
                    "Reduce each layer's gradients over DP x CP as soon as its last backward "
                    "pass has written them, overlapped with the passes after (on), or all at once "
                    "after the stage's last pass (off)")
        ->capture_default_str()
        ->check(CLI::IsMember({"on", "off"}))
        ->group("Grid");
    add_overlap_param_gather_flag(*sub, d.overlap_param_gather, "Grid");
}

void add_data_options(CLI::App* sub, SimulateArgs* args) {
    sim::SimulationConfig& d = args->defaults;
    sub->add_option("--balancer", args->balancer, "Packing: fixed, ilp or wlb")
        ->capture_default_str()
        ->group("Data");
    sub->add_option("--compare", args->compare,
                    "Simulate each of these balancers with otherwise identical settings, e.g. "
                    "fixed,ilp,wlb; the first is the baseline of the 'vs' column")
        ->group("Data");
    sub->add_option("--hot-switch", args->hot_switch,
                    "HotSPa's hot switching: LO-HI:LAYOUT;... e.g. "
                    "0-2048:dp4;2048-8192:dp2,tp2;8192-:pp2,cp2, each bucket's documents played "
                    "under its layout over the same ranks (docs/plan.md); compared with the "
                    "static --dp/--tp/--pp/--cp layout on the same documents")
        ->group("Data");
    sub->add_option("--cp-shard", args->cp_shard,
                    "CP sharding: contiguous, zigzag, per-doc, adaptive, or chunked (each "
                    "--attention-chunk chunk cut over the CP ranks: FPDT's input order)")
        ->capture_default_str()
        ->group("Data");
    sub->add_option("--lengths", d.lengths,
                    "Document lengths: lognormal:median=M,sigma=S, long-tail:context=N, "
                    "file:PATH (default long-tail:context=C,median=min(1900, C/8), C = --context)")
        ->group("Data");
    sub->add_option("--documents", d.documents, "How many documents to sample")
        ->capture_default_str()
        ->group("Data");
    sub->add_option("--seed", d.seed, "Sampling and shuffling seed (the engine's)")
        ->capture_default_str()
        ->group("Data");
    auto* steps = sub->add_option("--steps", d.steps,
                                  "Steps to play (with --compare, one epoch unless given)")
                      ->capture_default_str()
                      ->group("Data");
    sub->add_option("--epochs", d.epochs,
                    "Play whole epochs instead of --steps: every document once per epoch, the "
                    "balancer's delayed documents drained at the end (default with --compare: 1)")
        ->excludes(steps)
        ->group("Data");
    sub->add_option("--ilp-window", d.ilp_window, "Global batches the ILP balancer packs jointly")
        ->capture_default_str()
        ->check(CLI::Range(1, 64))
        ->group("Data");
    sub->add_option("--wlb-max-tokens", d.wlb_max_tokens,
                    "wlb: S_max, the most tokens of one variable-length micro-batch (at least "
                    "--context; default: what the memory model fits in --gpu-memory-gib)")
        ->group("Data");
    sub->add_option("--gpu-memory-gib", d.gpu_memory_gib,
                    "GPU memory for the default --wlb-max-tokens")
        ->capture_default_str()
        ->group("Data");
    sub->add_option("--wlb-max-delay", args->wlb_max_delay,
                    "wlb: a document held back this many steps goes first into the next one "
                    "(default: unbounded, the published packer)")
        ->group("Data");
    sub->add_option("--wlb-thresholds", args->wlb_thresholds,
                    "wlb: outlier queue thresholds L1,L2,... in tokens, none, or tuned "
                    "(replayed on the first epoch, mean delay at most 1 step)")
        ->capture_default_str()
        ->group("Data");
    sub->add_option("--packing-cost", args->packing_cost,
                    "What ilp and wlb balance: model (the model's training FLOPs), fitted (the "
                    "cost model of --calibrate or --cost-model) or FILE.json (a cost model)")
        ->capture_default_str()
        ->group("Data");
    sub->add_option("--attention-kernel", d.attention_kernel,
                    "What --cp-shard adaptive weighs: ideal (attention work), cpu or cuda "
                    "(fulcrum-train's kernels on short shards); with --calibrate, the run's own")
        ->capture_default_str()
        ->group("Data");
    sub->add_option("--ilp-time-limit", d.ilp_time_limit_s,
                    "Seconds the ILP balancer may take per step")
        ->capture_default_str()
        ->group("Data");
}

}  // namespace

Command add_simulate_command(CLI::App& app) {
    auto args = std::make_shared<SimulateArgs>();
    auto* sub = app.add_subcommand(
        "simulate",
        "Predict step time, imbalance and pipeline bubble of a DP x TP x PP x CP grid from a "
        "cost model, playing the engine's packing, pipeline schedule and collectives; "
        "optionally write the simulated run as a run database (docs/simulate.md).\n\n"
        "  fulcrum simulate --calibrate run.fulcrum --pp 4 --compare fixed,ilp,wlb\n"
        "  fulcrum simulate --layers 32 --hidden 4096 --heads 32 --context 32768 --dp 32 "
        "--pp 8 --cp 4 --tp 4 --micro-batches 64 --steps 2 -o big.fulcrum");
    args->command = sub;
    add_output_options(sub, args.get());
    add_cost_model_options(sub, args.get());
    add_model_options(sub, args->defaults);
    add_grid_options(sub, args.get());
    add_data_options(sub, args.get());
    return [args] { return run_simulate(*args); };
}

}  // namespace fulcrum::cli
