#include "core/parallel/nccl_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <span>

namespace fulcrum::parallel {
namespace {

// NCCL 2.30.7, src/graph/tuning.cc:148-212 (ncclTunerConstantsDefaults), by [algorithm]
// [protocol] with tree before ring and LL, LL128, Simple: µs.
constexpr double kBaseLatency[2][3] = {{6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}};
constexpr double kNvlinkLatency[2][3] = {{0.6, 1.25, 4.0}, {0.6, 1.9, 3.4}};
constexpr double kNetLatency[2][3] = {{5.0, 8.5, 14.0}, {2.7, 4.0, 14.0}};

// Caps by GPU generation (Ampere, Hopper) and node count (1, 2, 3 or more), GB/s:
// llMaxBws (one node: by generation; across nodes: by host CPU, Intel then AMD),
// perChMaxRingLL128Bws, perChMaxTreeLL128Bws, perChMaxTreeBws.
constexpr double kLlMaxOneNode[2] = {87.7, 141.0};
constexpr double kLlMaxAcross[2][2] = {{39.0, 20.4}, {22.5, 19.0}};  // [amd][2 nodes, more]
constexpr double kRingLl128PerChannel[2][3] = {{20, 20, 20}, {36.7, 36.7, 36.7}};
constexpr double kTreeLl128PerChannel[2][3] = {{20, 20, 20}, {36.7, 36.7, 29.0}};
constexpr double kTreePerChannel[2][3] = {{24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}};

// treeCorrectionFactor[protocol][log2(bytes / 64)], tuning.cc:623-627.
constexpr double kTreeCorrection[3][23] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7,  .7,  .7,  .6, .5,
     .4,  .4,  .5,  .6,  .7, .8, .9, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7,  .6, .6,
     .6,  .6,  .6,  .6,  .8,  .9, .9, .9, .9, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9}};

// The per-channel speeds the topology search tries, GB/s (src/graph/search.cc:1051-1067).
constexpr double kAmpereIntraSpeeds[] = {40, 30, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3};
constexpr double kAmpereInterSpeeds[] = {48, 30, 28, 24, 20, 18,  15,  12,   10,  9,
                                         7,  6,  5,  4,  3,  2.4, 1.2, 0.24, 0.12};
constexpr double kHopperIntraSpeeds[] = {60, 50, 40, 30, 24, 20, 15, 12, 11, 6, 3};
constexpr double kHopperInterSpeeds[] = {48, 45, 42, 40, 30,  24,  22,   20,  17.5,
                                         15, 12, 6,  3,  2.4, 1.2, 0.24, 0.12};
constexpr int kMaxRingChannels = 32;  // MAXCHANNELS / 2 (src/init.cc)

int generation_index(GpuGeneration generation) {
    return generation == GpuGeneration::hopper ? 1 : 0;
}

// The fastest speed the search tries that is at most `limit` (the slowest when none is).
double search_speed(std::span<const double> speeds, double limit) {
    for (double speed : speeds) {
        if (speed <= limit) {
            return speed;
        }
    }
    return speeds.back();
}

int log2_floor(double value) {
    return value >= 1 ? static_cast<int>(std::floor(std::log2(value))) : -1;
}

int steps(Collective collective, int ranks) {
    switch (collective) {
        case Collective::all_reduce:
            return 2 * (ranks - 1);
        case Collective::all_gather:
        case Collective::reduce_scatter:
            return ranks - 1;
        case Collective::broadcast:
            return ranks;
    }
    return ranks;
}

// NVLS within a node and NVLSTree across (tuning.cc:307-323, 424-428): Simple only, its own
// graph of 8 channels at the search's speed for an eighth of the NVLinks (40 GB/s on DGX
// H100, 60 across), the switches' efficiency 0.85 over all channels but one, and NVLSTree's
// cap per channel across nodes (perChMaxNVLSTreeBws, Hopper: 57.7 on 2 nodes, 45.5 beyond).
// NCCL offers NVLS only to a communicator with more than two GPUs on a node (src/transport/
// nvls.cc, ncclNvlsInit: gpuCount <= 2 turns it off), so a DP group of one GPU a node rings
// or trees over the network. Across nodes NVLSTree's tree runs through the node's NICs: groups
// leaving the node at the same time share them, as rings and trees do (nccl_graphs).
NcclPrice nvls_price(Collective collective, const GroupPlacement& group,
                     const ClusterNetwork& network, NcclProtocol protocol) {
    NcclPrice price{.algorithm = NcclAlgorithm::nvls, .protocol = protocol};
    if (!network.nvls || network.generation != GpuGeneration::hopper ||
        collective != Collective::all_reduce || protocol != NcclProtocol::simple ||
        group.ranks_per_node <= 2) {
        return price;
    }
    constexpr int kChannels = 8;
    constexpr double kEfficiency = 0.85;
    constexpr double kAcrossLatency = 20.9;  // hwLat[NET][NVLSTree][Simple]
    constexpr double kTreeCap[2] = {57.7, 45.5};
    const int ranks = std::max(group.ranks, 1), nodes = std::max(group.nodes, 1);
    const double speed = search_speed(kHopperIntraSpeeds, network.nvlink_gbs() / kChannels);
    double bandwidth = speed * kEfficiency * (kChannels - 1) / kChannels * 2;
    double latency = 25;  // hwLat[NVLINK][NVLS][Simple]; NVLS has no base latency
    if (nodes > 1) {
        const double share = 1.0 / std::max(group.groups_per_node, 1);
        const double across = 60 * (nodes <= 2 ? 2 : 1);
        bandwidth = std::min(bandwidth, share * std::min(across, kTreeCap[nodes <= 2 ? 0 : 1]));
        latency += 2 * log2_floor(nodes) * kAcrossLatency;
    }
    price.bus_gbs = kChannels * bandwidth;
    price.algorithm_gbs = price.bus_gbs * ranks / steps(collective, ranks);
    price.latency_us = latency;
    return price;
}

}  // namespace

const char* collective_name(Collective collective) {
    switch (collective) {
        case Collective::all_reduce:
            return "all-reduce";
        case Collective::all_gather:
            return "all-gather";
        case Collective::reduce_scatter:
            return "reduce-scatter";
        case Collective::broadcast:
            return "broadcast";
    }
    return "?";
}

const char* nccl_algorithm_name(NcclAlgorithm algorithm) {
    switch (algorithm) {
        case NcclAlgorithm::tree:
            return "tree";
        case NcclAlgorithm::ring:
            return "ring";
        case NcclAlgorithm::nvls:
            break;
    }
    return "NVLS";
}

const char* nccl_protocol_name(NcclProtocol protocol) {
    switch (protocol) {
        case NcclProtocol::ll:
            return "LL";
        case NcclProtocol::ll128:
            return "LL128";
        case NcclProtocol::simple:
            return "Simple";
    }
    return "?";
}

NcclGraphs nccl_graphs(const GroupPlacement& group, const ClusterNetwork& network) {
    const bool hopper = network.generation == GpuGeneration::hopper;
    const std::span<const double> intra_speeds =
        hopper ? std::span<const double>(kHopperIntraSpeeds) : kAmpereIntraSpeeds;
    const std::span<const double> inter_speeds =
        hopper ? std::span<const double>(kHopperInterSpeeds) : kAmpereInterSpeeds;
    const double nvlink_gbs = network.nvlink_gbs();
    NcclGraphs graphs;
    NcclGraph& ring = graphs.ring;
    if (!group.leaves_node()) {
        // As many channels of the fastest speed as a GPU's NVLinks carry (A100: 6 × 40).
        const double speed = search_speed(intra_speeds, nvlink_gbs);
        ring.channels = std::clamp(static_cast<int>(nvlink_gbs / speed), 1, kMaxRingChannels);
        ring.bw_intra = ring.bw_inter = speed;
    } else {
        // One channel through each NIC the group has: all of the node's when it leaves alone,
        // a share when others leave at once; a channel runs at the slower of NIC and path.
        const double nics =
            static_cast<double>(network.nics_per_node) / std::max(group.groups_per_node, 1);
        const double path = network.nic_channel_gbs();
        ring.channels = std::clamp(static_cast<int>(nics), 1, kMaxRingChannels);
        ring.bw_inter = search_speed(inter_speeds, nics >= 1 ? path : path * nics);
        ring.bw_intra = ring.bw_inter;
    }
    // ncclTopoDupChannels (search.cc:1036-1049): fast channels are split in two.
    if (ring.bw_intra >= 25 && !(hopper && ring.bw_intra < 50 && ring.channels > 4)) {
        ring.channels = std::min(2 * ring.channels, kMaxRingChannels);
        ring.bw_intra /= 2;
        ring.bw_inter /= 2;
    }
    graphs.tree = ring;
    if (group.leaves_node()) {
        // The tree's search raises its in-node speed while under twice the network's, as far
        // as NVLink carries it (2 DGX A100: 30 within, 24 across).
        graphs.tree.bw_intra =
            std::max(ring.bw_inter, std::min(nvlink_gbs / ring.channels, 2 * ring.bw_inter));
    }
    graphs.runtime_channels = std::min(64, 2 * ring.channels);
    if (hopper && group.leaves_node() && ring.bw_intra > 45 && graphs.runtime_channels < 16) {
        graphs.runtime_channels = std::min(64, 2 * graphs.runtime_channels);
    }
    return graphs;
}

double send_gbs(const GroupPlacement& pair, const ClusterNetwork& network) {
    if (!pair.leaves_node()) {
        return network.nvlink_gbs();
    }
    return static_cast<double>(network.nics_per_node) / std::max(pair.groups_per_node, 1) *
           network.nic_channel_gbs();
}

double all_to_all_ns_per_byte(const GroupPlacement& group, const ClusterNetwork& network) {
    const double n = std::max(group.ranks, 1);
    if (n <= 1) {
        return 0;
    }
    const double local = std::min<double>(std::max(group.ranks_per_node, 1), n);
    const double nvlink_share = (local - 1) / n, network_share = (n - local) / n;
    double ns = nvlink_share / network.nvlink_gbs();
    if (network_share > 0) {
        const double senders = local * std::max(group.groups_per_node, 1);
        const double nic_gbs =
            static_cast<double>(network.nics_per_node) / senders * network.nic_channel_gbs();
        ns = std::max(ns, network_share / nic_gbs);
    }
    return ns;
}

NcclPrice nccl_price(Collective collective, const GroupPlacement& group,
                     const ClusterNetwork& network, NcclAlgorithm algorithm,
                     NcclProtocol protocol) {
    NcclPrice price{.algorithm = algorithm, .protocol = protocol};
    if (algorithm == NcclAlgorithm::nvls) {
        return nvls_price(collective, group, network, protocol);
    }
    const bool tree = algorithm == NcclAlgorithm::tree;
    if (tree && collective != Collective::all_reduce) {
        return price;  // NCCL's trees are for all-reduce only
    }
    const int ranks = std::max(group.ranks, 1), nodes = std::max(group.nodes, 1);
    const int generation = generation_index(network.generation);
    const int node_bucket = nodes <= 2 ? nodes - 1 : 2;
    const double ll_max = nodes == 1 ? kLlMaxOneNode[generation]
                                     : kLlMaxAcross[network.amd_host ? 1 : 0][nodes <= 2 ? 0 : 1];
    const NcclGraphs graphs = nccl_graphs(group, network);
    const NcclGraph& graph = tree ? graphs.tree : graphs.ring;
    const int a = tree ? 0 : 1, p = static_cast<int>(protocol);

    double bus = graph.channels * (nodes <= 2 ? graph.bw_intra : graph.bw_inter);
    if (!tree && protocol == NcclProtocol::ll) {
        bus = std::min(ll_max, bus * 0.5);
    }
    if (!tree && protocol == NcclProtocol::ll128) {
        bus = std::min(bus * 0.92, graph.channels * kRingLl128PerChannel[generation][node_bucket]);
    }
    if (tree) {
        bus = std::min(bus * 0.92, graph.channels * kTreePerChannel[generation][node_bucket]);
        if (protocol == NcclProtocol::ll) {
            bus = std::min(bus / 3.8, ll_max);
        }
        if (protocol == NcclProtocol::ll128) {
            bus = std::min(bus * (nodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0),
                           graph.channels * kTreeLl128PerChannel[generation][node_bucket]);
        }
        // Hopper's search falls back to the TREE pattern across nodes (search.cc:1215-1219).
        if (network.generation == GpuGeneration::hopper && nodes > 1) {
            bus *= 0.85;
        }
    }
    const int nsteps = steps(collective, ranks);
    price.bus_gbs = bus;
    price.algorithm_gbs = bus * (tree ? 0.5 : static_cast<double>(ranks) / nsteps);

    const double intra_latency = kNvlinkLatency[a][p];
    const bool one_per_node = ranks == nodes;
    const double inter_latency = kNetLatency[one_per_node ? 0 : a][p];
    double latency = kBaseLatency[a][p];
    if (tree) {
        latency += 2 * ((ranks / nodes - 1) * intra_latency + log2_floor(nodes) * inter_latency);
    } else if (collective == Collective::broadcast) {
        // Rings of a broadcast share channels within a node, not across (sameChannels).
        if (nodes == 1) {
            latency += intra_latency;
        } else {
            latency +=
                nsteps * (protocol == NcclProtocol::simple ? kNetLatency[0][p] : kNetLatency[1][p]);
        }
    } else {
        const double overhead =
            nodes > 1 ? (network.amd_host ? 2.0 : 1.0) * (protocol == NcclProtocol::simple ? 3 : 1)
                      : 0.0;
        const int inter_steps =
            nodes == 1 ? 0 : (collective == Collective::all_reduce ? 2 * (nodes - 1) : nodes - 1);
        latency += (nsteps - inter_steps) * std::max(intra_latency, overhead) +
                   inter_steps * inter_latency;
    }
    price.latency_us = latency;
    return price;
}

NcclCall nccl_call(Collective collective, const GroupPlacement& group,
                   const ClusterNetwork& network) {
    NcclCall call{.collective = collective,
                  .group = group,
                  .call_overhead_us = network.call_overhead_us,
                  .host_launch_us = network.host_launch_us};
    if (group.ranks <= 1) {
        return call;
    }
    call.runtime_channels = nccl_graphs(group, network).runtime_channels;
    for (NcclAlgorithm algorithm :
         {NcclAlgorithm::tree, NcclAlgorithm::ring, NcclAlgorithm::nvls}) {
        for (NcclProtocol protocol :
             {NcclProtocol::ll, NcclProtocol::ll128, NcclProtocol::simple}) {
            const NcclPrice price = nccl_price(collective, group, network, algorithm, protocol);
            if (price.algorithm_gbs > 0) {
                call.prices.push_back(price);
            }
        }
    }
    return call;
}

NcclEstimate nccl_time(const NcclCall& call, double bytes) {
    if (call.prices.empty()) {
        return {.time_us = 0};
    }
    NcclEstimate best{.time_us = std::numeric_limits<double>::infinity()};
    const int log_size = log2_floor(std::floor(bytes / 64));
    for (const NcclPrice& price : call.prices) {
        double bandwidth = price.algorithm_gbs, latency = price.latency_us;
        if (price.algorithm == NcclAlgorithm::tree && log_size >= 0 && log_size < 23) {
            bandwidth *= kTreeCorrection[static_cast<int>(price.protocol)][log_size];
        }
        if (price.algorithm == NcclAlgorithm::ring && price.protocol == NcclProtocol::simple &&
            call.group.nodes > 1 && call.collective == Collective::all_reduce &&
            bytes / (static_cast<double>(call.runtime_channels) * call.group.ranks) >= 64) {
            latency *= 1.4;  // the ring's plateau across nodes, sm80 and later
        }
        const double time = latency + bytes / (1000 * bandwidth);
        if (time < best.time_us) {
            best = {price.algorithm, price.protocol, time};
        }
    }
    return best;
}

NcclEstimate nccl_time(Collective collective, double bytes, const GroupPlacement& group,
                       const ClusterNetwork& network) {
    return nccl_time(nccl_call(collective, group, network), bytes);
}

NcclEstimate nccl_call_time(const NcclCall& call, double bytes, int gpus_a_process) {
    NcclEstimate estimate = nccl_time(call, bytes);
    if (call.prices.empty()) {
        return estimate;
    }
    // A ring moves nothing past a GPU whose kernel has not started: with several GPUs to a
    // process the transfer begins once the last one is launched, after the others' launches.
    estimate.time_us +=
        call.call_overhead_us + (std::max(gpus_a_process, 1) - 1) * call.host_launch_us;
    return estimate;
}

}  // namespace fulcrum::parallel
