#include "core/sim/hot_switch_play.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>

#include "core/sim/calibration.h"
#include "core/sim/grad_reduction.h"
#include "core/sim/layer_costs.h"
#include "core/sim/pass_pricing.h"
#include "core/sim/run_play.h"
#include "core/sim/sim_trace.h"
#include "core/store/trace_writer.h"
#include "core/trace/annotations.h"
#include "core/util/json_text.h"

namespace fulcrum::sim {

SwitchCost switch_cost(const SimulationConfig& config, const parallel::GridShape& from,
                       const parallel::GridShape& to, bool with_gradients, bool parameters) {
    const ModelShape& model = config.model;
    // A parameter in the compute type, its gradient accumulator in the reduction's.
    const double element =
        static_cast<double>((parameters ? element_bytes(config.dtype) : 0) +
                            (with_gradients ? gradient_element_bytes(config) : 0));
    if (element == 0) {
        return {};
    }
    parallel::SwitchModel switched;
    switched.layers = model.layers;
    switched.layer_bytes = parallel::layer_parameters(model) * element;
    switched.embedding_bytes = parallel::embedding_parameters(model) * element;
    const int per_node = std::max(config.hardware.gpus_per_node, 1);
    SwitchCost cost{parallel::plan_switch(switched, from, to, per_node), 0};
    if (cost.plan.transfers.empty()) {
        return cost;
    }
    const auto world = static_cast<std::size_t>(from.world());
    // [rank]: NVLink sent, received; network sent, received.
    std::vector<std::array<double, 4>> moved(world, {0, 0, 0, 0});
    for (const parallel::SwitchTransfer& transfer : cost.plan.transfers) {
        const bool network = transfer.source / per_node != transfer.destination / per_node;
        moved[static_cast<std::size_t>(transfer.source)][network ? 2 : 0] += transfer.bytes;
        moved[static_cast<std::size_t>(transfer.destination)][network ? 3 : 1] += transfer.bytes;
    }
    double slowest = 0;
    if (const auto& network = config.hardware.network) {
        // A described network (docs/simulate.md): a GPU's NVLinks; across nodes every rank
        // moves at once, so a node's NICs carry what all its ranks send and receive.
        const double nvlink_gbs = network->nvlink_gbs();
        const double node_gbs = network->nics_per_node * network->nic_channel_gbs();
        std::vector<std::array<double, 2>> node(world / static_cast<std::size_t>(per_node) + 1,
                                                {0, 0});
        for (std::size_t rank = 0; rank < world; ++rank) {
            slowest = std::max(slowest, std::max(moved[rank][0], moved[rank][1]) / nvlink_gbs);
            node[rank / static_cast<std::size_t>(per_node)][0] += moved[rank][2];
            node[rank / static_cast<std::size_t>(per_node)][1] += moved[rank][3];
        }
        for (const auto& [sent, received] : node) {
            slowest = std::max(slowest, std::max(sent, received) / node_gbs);
        }
    } else {
        for (const auto& rank : moved) {
            slowest = std::max(slowest,
                               std::max(std::max(rank[0], rank[1]) / config.hardware.nvlink_gbs,
                                        std::max(rank[2], rank[3]) / config.hardware.network_gbs));
        }
    }
    cost.ns = std::llround(slowest + config.hardware.p2p_latency_us * 1e3);
    return cost;
}

SimulationConfig under_layout(const SimulationConfig& config, const parallel::GridShape& grid) {
    SimulationConfig played = config;
    played.layout.grid = grid;
    played.layout.stage_layers.clear();
    // Sequence parallelism splits what TP replicates: a layout without TP has none to split.
    played.layout.sequence_parallel = config.layout.sequence_parallel && grid.tp > 1;
    if (!config.calibrations.empty()) {
        Calibration merged = merge_calibrations(config.calibrations, config.calibration_names, grid,
                                                played.layout.sequence_parallel);
        played.cost_model = std::move(merged.model);
        played.cost_origin = merged.origin;
    }
    return played;
}

SimulationConfig bucket_config(const SimulationConfig& config,
                               const parallel::HotSwitchBucket& bucket,
                               std::vector<std::int64_t> lengths) {
    SimulationConfig played = under_layout(config, bucket.layout);
    played.hot_switch.reset();
    played.accumulate_gradients = true;  // the reduction follows the bucket (hot_switch_play.h)
    if (bucket.max_length > 0 && bucket.max_length < config.model.context) {
        played.model.context = static_cast<int>(bucket.max_length);
    }
    std::int64_t tokens = 0;
    for (std::int64_t length : lengths) {
        tokens += length;
    }
    const std::int64_t per_microbatch =
        static_cast<std::int64_t>(played.model.context) * bucket.layout.dp;
    played.layout.microbatches =
        static_cast<int>(std::max<std::int64_t>(1, (tokens + per_microbatch - 1) / per_microbatch));
    played.document_lengths = std::move(lengths);
    played.lengths.clear();
    played.epochs = 1;
    return played;
}

namespace {

Error invalid(std::string message) {
    return Error{ErrorCode::invalid_input, std::move(message)};
}

// Every bucket's config must be one the simulator plays: checked before any work.
Status check_buckets(const SimulationConfig& config) {
    if (!config.layout.stage_layers.empty()) {
        return invalid("--hot-switch: --stage-layers names one layout's stages; leave it out");
    }
    auto checked = parallel::parse_hot_switch_spec(
        parallel::hot_switch_spec_string(*config.hot_switch), {.world = config.layout.grid.world(),
                                                               .heads = config.model.heads,
                                                               .layers = config.model.layers});
    if (!checked) {
        return checked.error();
    }
    for (const parallel::HotSwitchBucket& bucket : config.hot_switch->buckets) {
        if (auto status = validate(bucket_config(config, bucket, {1})); !status) {
            return invalid("--hot-switch bucket " + parallel::bucket_bounds_string(bucket) + " (" +
                           parallel::layout_string(bucket.layout) + "): " + status.error().message);
        }
    }
    return {};
}

// One piece of a hot-switched step's timeline, the same on every rank.
struct Segment {
    enum class Kind { bucket, reduction, switch_layout, update } kind = Kind::bucket;
    std::int64_t start = 0, end = 0;
    int bucket = -1;  // the bucket played, or switched to
    int from_bucket = -1;
    std::int64_t documents = 0, tokens = 0, microbatches = 0;
    parallel::GridShape from, to;  // a reduction or an update: `to` is the layout it runs under
    bool gradients = false;
    bool parameters = true;
    parallel::SwitchPlan plan;
    std::vector<std::int64_t> stage_end, stage_bytes;  // a reduction: by stage of `to`
};

// A bucket's gradient reduction after its passes, as fulcrum-train's HotSwitchTrainer runs
// it: each stage of the bucket's layout all-reduces the whole gradients it holds over its
// DP × CP group (a partial sum of one grouping cannot be re-sharded to another), the
// slowest stage's ending the segment. Not overlapped with the bucket's passes.
Segment reduction(const SimulationConfig& hot, const parallel::GridShape& grid,
                  std::int64_t start) {
    // The whole reduction here: a hot-switched step's gather is not moved to the next one.
    SimulationConfig config = hot;
    config.overlap_param_gather = false;
    const StageCosts costs = config_costs(under_layout(config, grid));
    Segment segment;
    segment.kind = Segment::Kind::reduction;
    segment.to = grid;
    segment.start = start;
    segment.end = start;
    for (int s = 0; s < grid.pp; ++s) {
        GradientReductionInput input;
        input.stage = s;
        input.stages = grid.pp;
        input.layers = config.model.layers;
        input.stage_bytes =
            stage_parameters(config.model, grid, s) * reduction_element_bytes(config);
        input.step_start_ns = start;
        const std::int64_t end = grid.dp * grid.cp > 1
                                     ? gradient_reduction_end(input, {}, costs.dp_all_reduce).end_ns
                                     : start;
        segment.stage_end.push_back(end);
        segment.stage_bytes.push_back(input.stage_bytes);
        segment.end = std::max(segment.end, end);
    }
    return segment;
}

// The optimizer step, once at home (the first bucket's layout) after the gradients went back:
// the tied embedding's all-reduce and the gradient norm's first (update_start), then the
// optimizer.
Segment update(const SimulationConfig& config, const parallel::GridShape& home,
               std::int64_t start) {
    const StageCosts costs = config_costs(under_layout(config, home));
    Segment segment;
    segment.kind = Segment::Kind::update;
    segment.to = home;
    segment.start = start;
    const UpdateStart begin =
        update_start(std::vector<std::int64_t>(static_cast<std::size_t>(home.pp), start), costs,
                     embedding_gradient_bytes(config.model, home, gradient_element_bytes(config)));
    segment.end = begin.start + std::llround(std::max(costs.optimizer_ns, 0.0));
    return segment;
}

}  // namespace

std::int64_t bucket_reduction_ns(const SimulationConfig& config, const parallel::GridShape& grid) {
    return reduction(config, grid, 0).end;
}

namespace {

std::string segment_args(const Segment& segment, const parallel::HotSwitchSpec& spec, int rank) {
    // Bytes and counts, whole: a slice's bytes can be a fraction of a byte.
    const auto whole = [](double value) { return std::to_string(std::llround(value)); };
    std::string args = "{";
    const auto number = [&](std::string_view key, double value, bool comma = true) {
        args += std::string(comma ? "," : "") + "\"" + std::string(key) + "\":" + whole(value);
    };
    const auto text = [&](std::string_view key, std::string_view value) {
        args += ",\"" + std::string(key) + "\":";
        append_json_string(args, value);
    };
    if (segment.kind == Segment::Kind::bucket) {
        const parallel::HotSwitchBucket& bucket =
            spec.buckets[static_cast<std::size_t>(segment.bucket)];
        number("bucket", segment.bucket, false);
        text("layout", parallel::layout_string(bucket.layout));
        text("bounds", parallel::bucket_bounds_string(bucket));
        number("min_length", static_cast<double>(bucket.min_length));
        number("max_length", static_cast<double>(bucket.max_length));
        number("documents", static_cast<double>(segment.documents));
        number("tokens", static_cast<double>(segment.tokens));
        number("microbatches", static_cast<double>(segment.microbatches));
        return args + "}";
    }
    number("from_bucket", segment.from_bucket, false);
    number("to_bucket", segment.bucket);
    text("from", parallel::layout_string(segment.from));
    text("to", parallel::layout_string(segment.to));
    args += std::string(",\"gradients\":") + (segment.gradients ? "true" : "false");
    args += std::string(",\"parameters\":") + (segment.parameters ? "true" : "false");
    number("sent", segment.plan.sent[static_cast<std::size_t>(rank)]);
    number("received", segment.plan.received[static_cast<std::size_t>(rank)]);
    number("total_bytes", segment.plan.total_bytes);
    number("largest_send_bytes", segment.plan.largest_send_bytes);
    number("inter_node_bytes", segment.plan.inter_node_bytes);
    std::map<int, double> sent_to;
    for (const parallel::SwitchTransfer& transfer : segment.plan.transfers) {
        if (transfer.source == rank) {
            sent_to[transfer.destination] += transfer.bytes;
        }
    }
    args += ",\"sent_to\":{";
    bool first = true;
    for (const auto& [peer, bytes] : sent_to) {
        args += std::string(first ? "" : ",") + "\"" + std::to_string(peer) + "\":" + whole(bytes);
        first = false;
    }
    return args + "}}";
}

}  // namespace

namespace {

struct HotSwitchNames {
    StringId step, bucket, switch_layout, dp_all_reduce, optimizer;
};

// One step's ranges on every rank: the step, its buckets and switches (docs/annotations.md,
// "Hot switching"), the DP reduction and the optimizer. Returns the events written.
std::int64_t write_step(store::TraceWriter& out, const std::vector<LaneId>& lanes,
                        const HotSwitchNames& names, const std::vector<Segment>& segments,
                        const parallel::HotSwitchSpec& spec, std::int32_t step, std::int64_t start,
                        std::int64_t end) {
    std::vector<Event> events;
    const auto range = [&](StringId name, Category category, std::int64_t from, std::int64_t to,
                           std::int64_t bytes, StringId args) {
        if (to <= from && name != names.step) {
            return;
        }
        events.push_back(
            simulated_range(name, category, from, to, step, -1, -1, Phase::none, bytes, args));
    };
    std::int64_t written = 0;
    for (std::size_t r = 0; r < lanes.size(); ++r) {
        const int rank = static_cast<int>(r);
        events.clear();
        range(names.step, Category::schedule, start, end, -1, {});
        for (const Segment& segment : segments) {
            if (segment.kind == Segment::Kind::reduction) {
                // As the engine's trace names it, inside the bucket's range.
                const auto stage =
                    static_cast<std::size_t>(parallel::coordinates_of(segment.to, rank).pp);
                range(names.dp_all_reduce, Category::communication, segment.start,
                      segment.stage_end[stage], segment.stage_bytes[stage], {});
                continue;
            }
            if (segment.kind == Segment::Kind::update) {
                range(names.optimizer, Category::optimizer, segment.start, segment.end, -1, {});
                continue;
            }
            const StringId args = out.intern(segment_args(segment, spec, rank));
            if (segment.kind == Segment::Kind::bucket) {
                range(names.bucket, Category::schedule, segment.start, segment.end, -1, args);
            } else {
                const std::int64_t bytes =
                    std::llround(segment.plan.sent[r] + segment.plan.received[r]);
                range(names.switch_layout, Category::communication, segment.start, segment.end,
                      bytes, args);
            }
        }
        for (Event& event : events) {
            event.lane = lanes[r];
        }
        out.add_events(events.data(), events.size());
        written += static_cast<std::int64_t>(events.size());
    }
    return written;
}

}  // namespace

namespace {

// A hot-switched run in the making: the run so far, where the parameters are, and the
// segments of the step being played.
struct HotSwitchPlay {
    const SimulationConfig& config;
    const parallel::HotSwitchSpec& spec;
    SimulationResult result;
    parallel::GridShape current;
    int current_bucket = 0;
    std::vector<Segment> segments;
    std::int64_t now = 0;
    // The layouts that hold this step's parameters: home (the first bucket's) at a step's
    // start, then each one switched to (fulcrum-train moves the parameters into a layout once
    // a step, as its HotSwitchTrainer's parameters_current says).
    std::vector<parallel::GridShape> current_parameters;
    // Where the buckets' passes go (none without a writer): the step being played and the
    // micro-batches its earlier buckets numbered.
    BucketOutput passes;

    // Moves the parameters (where `to`'s layout does not hold them yet) and the step's
    // gradients so far (`gradients`) to bucket `to`'s layout.
    void switch_to(int to, bool gradients) {
        const parallel::GridShape& layout = spec.buckets[static_cast<std::size_t>(to)].layout;
        const bool parameters = std::find(current_parameters.begin(), current_parameters.end(),
                                          layout) == current_parameters.end();
        SwitchCost cost;
        if (layout != current) {
            cost = switch_cost(config, current, layout, gradients, parameters);
        }
        if (parameters) {
            current_parameters.push_back(layout);
        }
        // Nothing moves into a layout that needs nothing new (DP holds every layer).
        if (!cost.plan.transfers.empty()) {
            Segment segment;
            segment.kind = Segment::Kind::switch_layout;
            segment.from_bucket = current_bucket;
            segment.bucket = to;
            segment.from = current;
            segment.to = layout;
            segment.gradients = gradients;
            segment.parameters = parameters;
            segment.plan = std::move(cost.plan);
            segment.start = now;
            segment.end = now + cost.ns;
            now = segment.end;
            record(segment);
            segments.push_back(std::move(segment));
        }
        current = layout;
        current_bucket = to;
    }

    void record(const Segment& segment) {
        auto found = std::find_if(
            result.switches.begin(), result.switches.end(),
            [&](const SimulatedSwitch& s) { return s.from == segment.from && s.to == segment.to; });
        if (found == result.switches.end()) {
            found = result.switches.insert(result.switches.end(), {segment.from, segment.to});
        }
        found->count += 1;
        found->bytes += segment.plan.total_bytes;
        found->largest_send_bytes =
            std::max(found->largest_send_bytes, segment.plan.largest_send_bytes);
        found->ns += static_cast<double>(segment.end - segment.start);
    }

    // Plays bucket b's documents under its layout; the bubble fraction and imbalance of its
    // steps, weighted by their time, go into `weighted`.
    Status play_bucket(int b, std::vector<std::int64_t> lengths, const SimulationProgress& progress,
                       std::array<double, 2>& weighted) {
        const auto index = static_cast<std::size_t>(b);
        const SimulationConfig played =
            bucket_config(config, spec.buckets[index], std::move(lengths));
        passes.start_ns = now;
        auto bucket = simulate_bucket(played, passes, {.progress = {}, .cancel = progress.cancel});
        if (!bucket) {
            return bucket.error();
        }
        Segment segment;
        segment.bucket = b;
        segment.start = now;
        for (const SimulatedStep& step : bucket->steps) {
            segment.end += step.duration_ns;
            segment.microbatches += step.microbatches;
            weighted[0] += step.bubble_fraction * static_cast<double>(step.duration_ns);
            weighted[1] += step.imbalance * static_cast<double>(step.duration_ns);
        }
        segment.end += now;
        // Then its gradients are summed over its DP × CP groups, inside the bucket (as the
        // engine's bucket range holds its reduce_gradients).
        Segment reduced = reduction(config, played.layout.grid, segment.end);
        segment.end = reduced.end;
        segment.documents = static_cast<std::int64_t>(played.document_lengths.size());
        segment.tokens = bucket->tokens;
        SimulatedBucket& total = result.buckets[index];
        total.documents += segment.documents;
        total.tokens += segment.tokens;
        total.microbatches += segment.microbatches;
        total.ns += static_cast<double>(segment.end - segment.start);
        total.reduction_ns += static_cast<double>(reduced.end - reduced.start);
        now = segment.end;
        segments.push_back(segment);
        segments.push_back(std::move(reduced));
        return {};
    }
};

}  // namespace

Result<SimulationResult> simulate_hot_switched(const SimulationConfig& config,
                                               store::TraceWriter* out,
                                               const SimulationProgress& progress) {
    if (auto status = check_buckets(config); !status) {
        return status.error();
    }
    auto lengths = training_lengths(config);
    if (!lengths) {
        return lengths.error();
    }
    auto planner = balance::StepPlanner::create(std::move(*lengths), planner_options(config));
    if (!planner) {
        return planner.error();
    }
    const parallel::HotSwitchSpec& spec = *config.hot_switch;
    const StageCosts costs = config_costs(config);
    HotSwitchPlay play{config, spec, {}, spec.buckets.front().layout, 0, {}, 0, {}, {}};
    play.result.packing = planner->packing();
    play.result.wlb_tuning = planner->wlb_tuning();
    play.result.ranks = config.layout.grid.world();
    play.result.cost_source = costs.source;
    play.result.notes = costs.notes;
    for (const parallel::HotSwitchBucket& bucket : spec.buckets) {
        play.result.buckets.push_back({.bucket = bucket});
    }
    SimulatedLanes lanes;
    HotSwitchNames names;
    if (out != nullptr) {
        // Every rank with its coordinates under the first bucket's layout (where the
        // parameters start each step), with copy lanes where a bucket copies to host memory.
        const bool host_copies = std::ranges::any_of(spec.buckets, [&](const auto& bucket) {
            return copies_to_host(bucket_config(config, bucket, {1}));
        });
        lanes = add_simulated_ranks(*out, play.current, host_copies);
        play.passes.writer = out;
        play.passes.lanes = lanes;
        names = {out->intern(range_name::kStep), out->intern(range_name::kHotSwitchBucket),
                 out->intern(range_name::kHotSwitch), out->intern(range_name::kDpAllReduce),
                 out->intern(range_name::kOptimizer)};
    }
    balance::TrainedTotals trained;
    for (int k = 0; config.epochs > 0 ? !planner->finished() : k < config.steps; ++k) {
        if (progress.cancel != nullptr && progress.cancel->load()) {
            return Error{ErrorCode::cancelled, "the simulation was cancelled"};
        }
        auto plan = planner->next();
        if (!plan) {
            return plan.error();
        }
        std::vector<std::vector<std::int64_t>> by_bucket(spec.buckets.size());
        for (const auto& replica : plan->replicas) {
            for (const balance::PlannedMicroBatch& planned : replica) {
                for (const balance::Document& document : planned.packed.documents) {
                    by_bucket[static_cast<std::size_t>(bucket_of(spec, document.length))].push_back(
                        document.length);
                }
            }
        }
        SimulatedStep step;
        step.step = plan->step;
        step.epoch = plan->epoch;
        step.start_ns = play.now;
        step.tokens = plan->tokens;
        play.segments.clear();
        play.current_parameters = {spec.buckets.front().layout};
        play.passes.step = plan->step;
        play.passes.first_microbatch = 0;
        bool accumulated = false;
        std::array<double, 2> weighted{0, 0};  // bubble fraction and imbalance · time
        for (std::size_t b = 0; b < spec.buckets.size(); ++b) {
            if (by_bucket[b].empty()) {
                continue;
            }
            play.switch_to(static_cast<int>(b), accumulated);
            if (auto status = play.play_bucket(static_cast<int>(b), std::move(by_bucket[b]),
                                               progress, weighted);
                !status) {
                return status.error();
            }
            step.microbatches += static_cast<int>(play.segments.rbegin()[1].microbatches);
            accumulated = true;
        }
        // Home's parameters did not change during the step: only the gradients go back, and
        // the optimizer steps there.
        play.switch_to(0, accumulated);
        const Segment updated = update(config, play.current, play.now);
        play.result.update_ns += static_cast<double>(updated.end - updated.start);
        play.now = updated.end;
        play.segments.push_back(updated);
        step.duration_ns = play.now - step.start_ns;
        // The buckets' bubble fraction and imbalance (of their own packing), weighted by time.
        double played_ns = 0;
        for (const Segment& segment : play.segments) {
            // The buckets' passes: their reductions are not in the steps weighted.
            if (segment.kind == Segment::Kind::bucket) {
                played_ns += static_cast<double>(segment.end - segment.start);
            } else if (segment.kind == Segment::Kind::reduction) {
                played_ns -= static_cast<double>(segment.end - segment.start);
            }
        }
        step.bubble_fraction = played_ns > 0 ? weighted[0] / played_ns : 0.0;
        step.imbalance = played_ns > 0 ? weighted[1] / played_ns : 1.0;
        if (out != nullptr) {
            play.result.events += write_step(*out, lanes.main, names, play.segments, spec,
                                             plan->step, step.start_ns, play.now);
        }
        trained.add(*plan);
        play.result.steps.push_back(step);
        if (progress.progress) {
            progress.progress(config.epochs > 0 ? 0.0 : static_cast<double>(k + 1) / config.steps);
        }
    }
    summarize(play.result, trained, play.now, config.epochs);
    return std::move(play.result);
}

}  // namespace fulcrum::sim
