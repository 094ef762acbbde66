#include "core/plan/hot_switch_search.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "core/sim/hot_switch_play.h"

namespace fulcrum::plan {
namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();
constexpr double kLeastBucketShare = 0.02;  // of the steps' tokens

Error invalid(std::string message) {
    return Error{ErrorCode::invalid_input, "--hot-switch auto: " + std::move(message)};
}

// The static candidate's settings as a hot-switched step runs them: one model chunk a stage
// (no interleaving) and an even layer split, as fulcrum-train --hot-switch and the
// simulator's buckets take them.
Candidate switchable(Candidate c) {
    if (c.layout.schedule == parallel::PipelineSchedule::interleaved) {
        c.layout.schedule = parallel::PipelineSchedule::one_f_one_b;
    }
    c.layout.virtual_stages = 1;
    c.layout.stage_layers.clear();
    return c;
}

// The documents of each step, as simulate_hot_switched splits them into buckets: the global
// batch planned on the static layout.
Result<std::vector<std::vector<std::int64_t>>> step_documents(const sim::SimulationConfig& base) {
    auto lengths = sim::training_lengths(base);
    if (!lengths) {
        return lengths.error();
    }
    auto planner = balance::StepPlanner::create(std::move(*lengths), sim::planner_options(base));
    if (!planner) {
        return planner.error();
    }
    std::vector<std::vector<std::int64_t>> steps;
    for (int k = 0; k < base.steps; ++k) {
        auto plan = planner->next();
        if (!plan) {
            return plan.error();
        }
        std::vector<std::int64_t>& documents = steps.emplace_back();
        for (const auto& replica : plan->replicas) {
            for (const balance::PlannedMicroBatch& planned : replica) {
                for (const balance::Document& document : planned.packed.documents) {
                    documents.push_back(document.length);
                }
            }
        }
    }
    return steps;
}

// Powers of two strictly between the shortest and the longest document (and below the
// context): where a bucket may end.
std::vector<std::int64_t> cut_points(const std::vector<std::vector<std::int64_t>>& steps,
                                     int context) {
    std::int64_t shortest = std::numeric_limits<std::int64_t>::max(), longest = 0;
    for (const auto& documents : steps) {
        for (std::int64_t length : documents) {
            shortest = std::min(shortest, length);
            longest = std::max(longest, length);
        }
    }
    std::vector<std::int64_t> cuts;
    for (std::int64_t cut = 2; cut < context; cut *= 2) {
        if (cut > shortest && cut <= longest) {
            cuts.push_back(cut);
        }
    }
    return cuts;
}

// Every set of 1 .. most cut points, in increasing order.
std::vector<std::vector<std::int64_t>> cut_sets(const std::vector<std::int64_t>& cuts, int most) {
    std::vector<std::vector<std::int64_t>> sets;
    std::vector<std::int64_t> chosen;
    const std::function<void(std::size_t)> extend = [&](std::size_t from) {
        if (!chosen.empty()) {
            sets.push_back(chosen);
        }
        if (static_cast<int>(chosen.size()) == most) {
            return;
        }
        for (std::size_t i = from; i < cuts.size(); ++i) {
            chosen.push_back(cuts[i]);
            extend(i + 1);
            chosen.pop_back();
        }
    };
    extend(0);
    return sets;
}

// What the search prices: a bucket's pipelines under each layout (memoised by bounds and
// layout) and each switch (by layouts and whether gradients move).
class Pricing {
public:
    Pricing(const PlanRequest& request, const Candidate& base_candidate,
            const sim::SimulationConfig& base, const std::vector<std::vector<std::int64_t>>& steps,
            const std::vector<parallel::GridShape>& layouts)
        : request_(request),
          candidate_(base_candidate),
          base_(base),
          steps_(steps),
          layouts_(layouts) {}

    // Σ over the steps of the bucket's pipeline under layouts[l]; kNever when it does not fit
    // in memory or the simulator refuses it.
    double bucket_ns(std::int64_t low, std::int64_t high, std::size_t l) {
        const auto key = std::make_tuple(low, high, l);
        if (const auto found = buckets_.find(key); found != buckets_.end()) {
            return found->second;
        }
        return buckets_[key] = price_bucket({low, high, layouts_[l]});
    }

    double switch_ns(std::size_t from, std::size_t to, bool gradients) {
        if (from == to) {
            return 0;
        }
        const auto key = std::make_tuple(from, to, gradients);
        if (const auto found = switches_.find(key); found != switches_.end()) {
            return found->second;
        }
        return switches_[key] = static_cast<double>(
                   sim::switch_cost(base_, layouts_[from], layouts_[to], gradients).ns);
    }

    // The share of the steps' tokens in [low, high).
    double token_share(std::int64_t low, std::int64_t high) const {
        double inside = 0, all = 0;
        for (const auto& documents : steps_) {
            for (std::int64_t length : documents) {
                all += static_cast<double>(length);
                if (length >= low && (high < 0 || length < high)) {
                    inside += static_cast<double>(length);
                }
            }
        }
        return all > 0 ? inside / all : 0.0;
    }

private:
    bool fits(const parallel::HotSwitchBucket& bucket) const {
        PlanRequest shorter = request_;
        if (bucket.max_length > 0 && bucket.max_length < request_.model.context) {
            shorter.model.context = static_cast<int>(bucket.max_length);
        }
        Candidate c = candidate_;
        c.layout.grid = bucket.layout;
        c.layout.sequence_parallel = c.layout.sequence_parallel && bucket.layout.tp > 1;
        return parallel::peak_stage_memory(memory_shape(shorter, c)).total_bytes() <=
               usable_bytes(request_);
    }

    double price_bucket(const parallel::HotSwitchBucket& bucket) const {
        if (!fits(bucket)) {
            return kNever;
        }
        double total = 0;
        for (const auto& documents : steps_) {
            std::vector<std::int64_t> lengths;
            double tokens = 0, pairs = 0;
            for (std::int64_t length : documents) {
                if (bucket.contains(length)) {
                    lengths.push_back(length);
                    tokens += static_cast<double>(length);
                    pairs += static_cast<double>(length) * static_cast<double>(length + 1) / 2;
                }
            }
            if (lengths.empty()) {
                continue;
            }
            const sim::SimulationConfig played = sim::bucket_config(base_, bucket, lengths);
            if (!sim::validate(played)) {
                return kNever;
            }
            // The closed form prices micro-batches alike: the bucket's mean one, attending as
            // one sequence under packed attention.
            const double microbatches =
                static_cast<double>(played.layout.microbatches) * bucket.layout.dp;
            const double mean_tokens = tokens / microbatches;
            const double mean_pairs = played.packed_attention ? mean_tokens * (mean_tokens + 1) / 2
                                                              : pairs / microbatches;
            total += sim::estimate_step(played, sim::config_costs(played),
                                        std::llround(mean_tokens), std::llround(mean_pairs))
                         .pipeline_ns;
            // Every bucket that ran ends with its own gradient reduction, as the play has it.
            total += static_cast<double>(sim::bucket_reduction_ns(played, bucket.layout));
        }
        return total;
    }

    const PlanRequest& request_;
    const Candidate& candidate_;
    const sim::SimulationConfig& base_;
    const std::vector<std::vector<std::int64_t>>& steps_;
    const std::vector<parallel::GridShape>& layouts_;
    std::map<std::tuple<std::int64_t, std::int64_t, std::size_t>, double> buckets_;
    std::map<std::tuple<std::size_t, std::size_t, bool>, double> switches_;
};

// Every grid of `world` the plan enumerated that a spec may name (TP dividing the heads, no
// more stages than layers), in the plan's order.
std::vector<parallel::GridShape> layouts_of(const PlanRequest& request, const PlanResult& result,
                                            int world) {
    std::vector<parallel::GridShape> layouts;
    for (const Candidate& c : result.candidates) {
        if (c.layout.grid.world() != world ||
            std::find(layouts.begin(), layouts.end(), c.layout.grid) != layouts.end()) {
            continue;
        }
        const parallel::HotSwitchLimits limits{
            .world = world, .heads = request.model.heads, .layers = request.model.layers};
        if (parallel::parse_hot_switch_spec("0-:" + parallel::layout_string(c.layout.grid),
                                            limits)) {
            layouts.push_back(c.layout.grid);
        }
    }
    return layouts;
}

// A spec by the index of each bucket's layout, and its estimate.
struct Estimated {
    std::vector<std::pair<std::int64_t, std::int64_t>> bounds;
    std::vector<std::size_t> layouts;
    double ns = 0;

    parallel::HotSwitchSpec spec(const std::vector<parallel::GridShape>& grids) const {
        parallel::HotSwitchSpec spec;
        for (std::size_t b = 0; b < bounds.size(); ++b) {
            spec.buckets.push_back({bounds[b].first, bounds[b].second, grids[layouts[b]]});
        }
        return spec;
    }
};

// For one cut set, the best combinations of each bucket's few best layouts (adjacent buckets
// under one layout are left to the coarser cut set), switches included.
void combine(Pricing& pricing, const std::vector<std::int64_t>& cuts, std::size_t layout_count,
             const HotSwitchSearchOptions& options, int steps, std::vector<Estimated>& out) {
    std::vector<std::pair<std::int64_t, std::int64_t>> bounds;
    std::int64_t low = 0;
    for (std::int64_t cut : cuts) {
        bounds.emplace_back(low, cut);
        low = cut;
    }
    bounds.emplace_back(low, -1);
    std::vector<std::vector<std::pair<double, std::size_t>>> best(bounds.size());
    for (std::size_t b = 0; b < bounds.size(); ++b) {
        // A bucket with hardly any tokens gains little and costs two switches a step.
        if (pricing.token_share(bounds[b].first, bounds[b].second) < kLeastBucketShare) {
            return;
        }
        for (std::size_t l = 0; l < layout_count; ++l) {
            const double ns = pricing.bucket_ns(bounds[b].first, bounds[b].second, l);
            if (ns < kNever) {
                best[b].emplace_back(ns, l);
            }
        }
        if (best[b].empty()) {
            return;
        }
        std::sort(best[b].begin(), best[b].end());
        best[b].resize(std::min<std::size_t>(best[b].size(), options.layouts_per_bucket));
    }
    std::vector<std::size_t> pick(bounds.size(), 0);
    while (true) {
        double ns = 0;
        bool repeats = false;
        for (std::size_t b = 0; b < bounds.size(); ++b) {
            const std::size_t l = best[b][pick[b]].second;
            ns += best[b][pick[b]].first;
            if (b > 0) {
                const std::size_t before = best[b - 1][pick[b - 1]].second;
                repeats = repeats || before == l;
                ns += steps * pricing.switch_ns(before, l, true);
            }
        }
        ns += steps *
              pricing.switch_ns(best.back()[pick.back()].second, best[0][pick[0]].second, false);
        if (!repeats) {
            Estimated estimated{bounds, {}, ns};
            for (std::size_t b = 0; b < bounds.size(); ++b) {
                estimated.layouts.push_back(best[b][pick[b]].second);
            }
            out.push_back(std::move(estimated));
        }
        std::size_t b = 0;
        while (b < bounds.size() && ++pick[b] == best[b].size()) {
            pick[b++] = 0;
        }
        if (b == bounds.size()) {
            return;
        }
    }
}

// The specs of one recomputation level: estimated over every cut set, the best played.
Status search_level(const PlanRequest& request, const PlanResult& result,
                    const Candidate& base_candidate, const HotSwitchSearchOptions& options,
                    const HotSwitchSearchProgress& progress, double done, double share,
                    HotSwitchSearch& search) {
    sim::SimulationConfig base = simulation_config(request, base_candidate);
    base.epochs = 0;
    auto steps = step_documents(base);
    if (!steps) {
        return steps.error();
    }
    search.cut_points = cut_points(*steps, request.model.context);
    const std::vector<parallel::GridShape> layouts = layouts_of(request, result, search.world);
    search.layouts.clear();
    for (const parallel::GridShape& layout : layouts) {
        search.layouts.push_back(parallel::layout_string(layout));
    }
    Pricing pricing(request, base_candidate, base, *steps, layouts);
    const auto sets = cut_sets(search.cut_points, std::max(1, options.max_buckets - 1));
    std::vector<Estimated> estimated;
    for (std::size_t i = 0; i < sets.size(); ++i) {
        if (progress.cancel != nullptr && progress.cancel->load()) {
            return Error{ErrorCode::cancelled, "the search was cancelled"};
        }
        combine(pricing, sets[i], layouts.size(), options, base.steps, estimated);
        if (progress.progress) {
            progress.progress(done + share * 0.5 * static_cast<double>(i + 1) / sets.size());
        }
    }
    search.specs_estimated += static_cast<std::int64_t>(estimated.size());
    std::sort(estimated.begin(), estimated.end(),
              [](const Estimated& a, const Estimated& b) { return a.ns < b.ns; });
    estimated.resize(std::min<std::size_t>(estimated.size(), options.played));
    for (std::size_t i = 0; i < estimated.size(); ++i) {
        HotSwitchChoice choice;
        choice.spec = estimated[i].spec(layouts);
        choice.recompute = base_candidate.layout.recompute;
        choice.sequence_parallel = base_candidate.layout.sequence_parallel;
        choice.estimated_step_ns = estimated[i].ns / std::max(base.steps, 1);
        sim::SimulationConfig config = base;
        config.hot_switch = choice.spec;
        auto played = sim::simulate(config, nullptr, {.progress = {}, .cancel = progress.cancel});
        if (!played) {
            if (played.error().code == ErrorCode::cancelled) {
                return played.error();
            }
            continue;  // the estimate let through what the simulator refuses: not a choice
        }
        choice.step_ns = played->mean_step_ns;
        choice.tokens_per_second = played->tokens_per_second;
        double switching = 0;
        for (const sim::SimulatedSwitch& s : played->switches) {
            switching += s.ns;
        }
        const double total = played->mean_step_ns * static_cast<double>(played->steps.size());
        choice.switching_share = total > 0 ? switching / total : 0.0;
        search.played.push_back(std::move(choice));
        if (progress.progress) {
            progress.progress(done + share * (0.5 + 0.5 * static_cast<double>(i + 1) /
                                                        static_cast<double>(estimated.size())));
        }
    }
    return {};
}

// Every recomputation level from the static best's up, with its sequence parallelism (the
// simulator's) and without (fulcrum-train --hot-switch's): without it and an even split, a
// long bucket may fit only with more recomputation, which every bucket then pays.
Result<HotSwitchSearch> search_world(const PlanRequest& request, const PlanResult& result,
                                     std::size_t best_index, const HotSwitchSearchOptions& options,
                                     const HotSwitchSearchProgress& progress, double done,
                                     double share) {
    HotSwitchSearch search;
    const Candidate& best = result.candidates[best_index];
    search.world = best.layout.grid.world();
    search.static_candidate = best_index;
    search.static_tokens_per_second = best.tokens_per_second;
    std::vector<Candidate> bases;
    for (bool sequence_parallel : {true, false}) {
        if (sequence_parallel && !best.layout.sequence_parallel) {
            continue;
        }
        for (parallel::Recompute level : {parallel::Recompute::none, parallel::Recompute::selective,
                                          parallel::Recompute::full}) {
            if (level >= best.layout.recompute) {
                Candidate base = switchable(best);
                base.layout.recompute = level;
                base.layout.sequence_parallel = sequence_parallel;
                bases.push_back(std::move(base));
            }
        }
    }
    const double base_share = share / static_cast<double>(bases.size());
    for (std::size_t i = 0; i < bases.size(); ++i) {
        if (auto status =
                search_level(request, result, bases[i], options, progress,
                             done + static_cast<double>(i) * base_share, base_share, search);
            !status) {
            return status.error();
        }
    }
    std::stable_sort(search.played.begin(), search.played.end(),
                     [](const HotSwitchChoice& a, const HotSwitchChoice& b) {
                         return a.tokens_per_second > b.tokens_per_second;
                     });
    return search;
}

}  // namespace

Status validate(const HotSwitchSearchOptions& options) {
    if (options.max_buckets < 2 || options.max_buckets > 4) {
        return invalid("between 2 and 4 buckets (--hot-switch-buckets)");
    }
    if (options.layouts_per_bucket < 1 || options.played < 1) {
        return invalid("at least one layout per bucket and one spec to play (--hot-switch-play)");
    }
    return {};
}

Result<std::vector<HotSwitchSearch>> search_hot_switch(const PlanRequest& request,
                                                       const PlanResult& result,
                                                       const HotSwitchSearchOptions& options,
                                                       const HotSwitchSearchProgress& progress) {
    if (auto status = validate(options); !status) {
        return status.error();
    }
    std::vector<std::size_t> bests;  // each world's best ranked candidate
    for (int world : request.world_sizes) {
        const auto found = std::find_if(result.ranked.begin(), result.ranked.end(), [&](auto i) {
            return result.candidates[i].layout.grid.world() == world;
        });
        if (found != result.ranked.end()) {
            bests.push_back(*found);
        }
    }
    std::vector<HotSwitchSearch> searches;
    for (std::size_t w = 0; w < bests.size(); ++w) {
        const double share = 1.0 / static_cast<double>(bests.size());
        auto search = search_world(request, result, bests[w], options, progress,
                                   static_cast<double>(w) * share, share);
        if (!search) {
            return search.error();
        }
        searches.push_back(std::move(*search));
    }
    return searches;
}

std::string hot_switch_search_json(const PlanResult& result,
                                   const std::vector<HotSwitchSearch>& searches) {
    nlohmann::json worlds = nlohmann::json::array();
    for (const HotSwitchSearch& search : searches) {
        const Candidate& best = result.candidates[search.static_candidate];
        nlohmann::json world = {
            {"world", search.world},
            {"static",
             {{"layout", parallel::layout_string(best.layout.grid)},
              {"tokens_per_s", search.static_tokens_per_second}}},
            {"cut_points", search.cut_points},
            {"layouts", search.layouts},
            {"specs_estimated", search.specs_estimated},
            {"found", search.found()},
        };
        if (search.found()) {
            world["spec"] = parallel::hot_switch_spec_string(search.best().spec);
            world["tokens_per_s"] = search.best().tokens_per_second;
            world["step_ns"] = search.best().step_ns;
            world["speedup"] = search.speedup();
            world["recompute"] = parallel::recompute_name(search.best().recompute);
            world["sequence_parallel"] = search.best().sequence_parallel;
            world["switching_share"] = search.best().switching_share;
            world["train_command"] = search.train_command;
            world["simulate_command"] = search.simulate_command;
        }
        nlohmann::json played = nlohmann::json::array();
        for (const HotSwitchChoice& choice : search.played) {
            played.push_back({{"spec", parallel::hot_switch_spec_string(choice.spec)},
                              {"estimated_step_ns", choice.estimated_step_ns},
                              {"step_ns", choice.step_ns},
                              {"recompute", parallel::recompute_name(choice.recompute)},
                              {"sequence_parallel", choice.sequence_parallel},
                              {"tokens_per_s", choice.tokens_per_second},
                              {"switching_share", choice.switching_share}});
        }
        world["played"] = std::move(played);
        worlds.push_back(std::move(world));
    }
    return worlds.dump();
}

}  // namespace fulcrum::plan
