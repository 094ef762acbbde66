// Hot switching (HotSPa, SOSP'24, §4): each length bucket of a step trains under its own
// DP × TP × PP × CP layout on the same ranks, gradients accumulating across the buckets, with
// the parameters and the gradients accumulated so far moved point to point between layouts.
//
//   layouts:   one engine per distinct layout of the spec (its Topology, groups, GptModel in
//              its TP-local layout, ParallelTrainer). The first bucket's layout is home: its
//              AdamW holds the moments, every step starts and updates there.
//   a step:    the global batch (planned as the home layout plans it) is split by document
//              length; each bucket's documents are packed by the balancer for its layout
//              (capacity its upper bound or the context, max(1, ⌈tokens / (capacity · dp)⌉)
//              micro-batches per replica, as core/sim/hot_switch_play.h plays them) and run,
//              every pass scaled by 1/N_step of the whole step; after a bucket its gradients
//              are reduced over its layout's groups, so that every holder of a parameter holds
//              the whole sum so far and the sum moves like the parameter itself.
//   switches:  core/parallel/switch_plan.h plans them (HotSPa's Algorithm 1) twice: once for the
//              TP-split tensors of each layer (a TP rank holds its slice), once for the
//              TP-replicated ones (LayerNorms, the row-parallel biases, wpe with layer 0, lnf
//              with the last, the tied wte), which every TP rank holds whole: that is the
//              layout with TP folded into CP ({dp, 1, pp, cp·tp}, the same rank numbering).
//              Every planned slice travels over MPI from host copies, one message per peer;
//              what a rank holds under both layouts is copied locally. Moved gradients land in
//              a carried buffer that is added after the next bucket's reduction.
//   the end:   the accumulated gradients go home (gradients only: home's parameters did not
//              change during the step), then one optimizer step there.
//
// docs/engine.md, "Hot switching"; docs/decisions.md says why.
#pragma once

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "core/parallel/hot_switch_spec.h"
#include "core/parallel/switch_plan.h"
#include "engine/distributed/parallel_trainer.h"

namespace fulcrum::engine {

struct HotSwitchConfig {
    parallel::HotSwitchSpec spec;
    ModelShape model;
    std::uint64_t seed = 1;
    ChunkedAttentionOptions attention;
    // The schedule, recomputation, balancer and optimizer (the layout's stage_layers must be
    // empty; its grid is each bucket's own).
    ParallelTrainConfig train;
    PlannerOptions packing;  // the run's planner options; dp, cp, capacity set per bucket
    int gpus_per_node = 1;   // ranks in rank order that share a node (Algorithm 1's links)
};

// What one rank moved over the run, in bytes.
struct SwitchTraffic {
    std::vector<double> sent_to;  // [peer]
    double received = 0;
    int switches = 0;
};

// One layout's engine.
struct LayoutEngine {
    parallel::GridShape shape;
    std::unique_ptr<Topology> topology;
    ParallelGroups groups;
    std::unique_ptr<GptModel> model;
    std::unique_ptr<ParallelTrainer> trainer;
    bool parameters_current = true;        // its held parameters are the step's weights
    std::vector<float> carried_gradients;  // the step's gradients so far, moved in (host)
};

class HotSwitchTrainer {
public:
    // Checks what a spec needs of this model beyond parse_hot_switch_spec: lcm of any two TP
    // degrees divides the heads (a switch cuts every split tensor into that many pieces).
    static Status check(const parallel::HotSwitchSpec& spec, const ModelShape& model);

    // `world`: host MPI, for plans and the switches' host buffers; `device_world`: what the
    // layouts' groups are split from (the world itself on the CPU).
    HotSwitchTrainer(Backend& backend, Communicator& world, Communicator& device_world,
                     const TrainingDocuments& documents, HotSwitchConfig config);

    Result<StepReport> step(const StepPlan& global);

    const Topology& home_topology() const { return *layouts_.front()->topology; }
    GptModel& home_model() { return *layouts_.front()->model; }
    std::vector<float> gather_parameters() {
        return layouts_.front()->trainer->gather_parameters();
    }
    const SwitchTraffic& traffic() const { return traffic_; }

    // Moves the parameters home → each other layout → home, the home copy wiped in between,
    // and compares the whole model bit for bit (on every rank; true when equal). Before any
    // step; emits no ranges.
    bool parameters_survive_round_trips();

private:
    // A switch planned: this rank's slices to send (by peer), to receive (by peer, in the
    // senders' order) and to copy itself, as element ranges of the two local layouts; and
    // its bytes (the whole switch's the same on every rank).
    struct SwitchWork {
        bool parameters = false, gradients = false;
        std::vector<std::vector<std::vector<ElementRange>>> outgoing, incoming;
        std::vector<std::pair<std::vector<ElementRange>, std::vector<ElementRange>>> local;
        std::vector<double> sent_to;  // [peer]
        double received = 0, total_bytes = 0, largest_send_bytes = 0, inter_node_bytes = 0;
    };
    SwitchWork prepare(const LayoutEngine& from, const LayoutEngine& to, bool parameters,
                       bool gradients) const;
    void execute(const SwitchWork& work, LayoutEngine& from, LayoutEngine& to);
    // Moves what the step needs from `from` to `to` (parameters, the gradients so far), in a
    // `hot-switch` range.
    void switch_layout(int from_bucket, int to_bucket, LayoutEngine& from, LayoutEngine& to,
                       bool parameters, bool gradients);
    // Packs, by the balancer, bucket `b`'s documents for its layout and runs them; adds to
    // the step's loss, tokens and micro-batches.
    Status run_bucket(int b, const std::vector<balance::Document>& documents, int step,
                      float loss_scale, StepReport& report, double& loss_sum);
    LayoutEngine& layout_of(int bucket) {
        return *layouts_[static_cast<std::size_t>(
            bucket_layout_[static_cast<std::size_t>(bucket)])];
    }

    Communicator& world_;
    const TrainingDocuments& documents_;
    HotSwitchConfig config_;
    std::vector<std::unique_ptr<LayoutEngine>> layouts_;  // [0]: home
    std::vector<int> bucket_layout_;                      // bucket → index in layouts_
    SwitchTraffic traffic_;
    int numbered_microbatches_ = 0;  // of the step so far: the next round's first `mb`
    bool annotate_ = true;
};

}  // namespace fulcrum::engine
