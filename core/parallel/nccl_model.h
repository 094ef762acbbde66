// What a collective costs as NCCL prices it: NCCL's own tuning model (NVIDIA/nccl 2.30.7,
// src/graph/tuning.cc, the same for A100 and H100 since 2.23.4), which its tuner uses to
// choose an algorithm and a protocol for each call. Ring and tree, each with the LL, LL128 and
// Simple protocols; a latency (a base per algorithm and protocol, plus one per step on NVLink
// or on the network) and a bus bandwidth (channels × bandwidth a channel, with each protocol's
// efficiency and caps) give time = latency + bytes / algorithm bandwidth, and the lowest time
// wins. Bytes are nccl-tests' `size`: the buffer of an all-reduce or broadcast, the whole
// gathered buffer of an all-gather or reduce-scatter.
//
// The channels and their bandwidth come from NCCL's topology search, which this derives from
// the system's parts as the search finds them on DGX-like nodes (src/graph/search.cc): within
// a node, a GPU's NVLinks to the NVSwitches; across nodes, one channel through each NIC the
// group has, at the slower of the NIC and its PCIe path. A group that leaves its node alone
// has all of the node's NICs; groups leaving at the same time (placement.h) share them.
// docs/simulate.md, "Collectives as NCCL prices them", gives every constant's source.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/parallel/placement.h"

namespace fulcrum::parallel {

enum class Collective { all_reduce, all_gather, reduce_scatter, broadcast };
const char* collective_name(Collective collective);  // "all-reduce", ...

// nvls: NVLink SHARP, the NVSwitches reducing (Hopper); NCCL's NVLS within a node, NVLSTree
// across nodes. Only for all-reduce here: NCCL prices its all-gather and reduce-scatter below
// the ring's on DGX nodes.
enum class NcclAlgorithm { tree, ring, nvls };
enum class NcclProtocol { ll, ll128, simple };
const char* nccl_algorithm_name(NcclAlgorithm algorithm);  // "tree", "ring", "NVLS"
const char* nccl_protocol_name(NcclProtocol protocol);     // "LL", "LL128", "Simple"

// The GPU generation, which picks NCCL's per-architecture caps and search speeds.
enum class GpuGeneration { ampere, hopper };

// A cluster's links as NCCL sees them, by their parts. The defaults: DGX H100.
struct ClusterNetwork {
    GpuGeneration generation = GpuGeneration::hopper;
    int gpus_per_node = 8;
    // NVLinks from a GPU to the NVSwitches, and NCCL's bandwidth of one (src/graph/topo.h:
    // SM80 20.0, SM90 20.6 GB/s).
    int nvlink_links = 18;
    double nvlink_link_gbs = 20.6;
    // The network: NICs a node, one NIC's bandwidth a direction (NCCL: Gb/s ÷ 8; HDR 200 Gb/s
    // 25, NDR 400 Gb/s 50), and the PCIe path between a GPU and its NIC (Gen4 x16 24, Gen5 x16
    // 48 GB/s), of which a channel gets the slower.
    int nics_per_node = 8;
    double nic_gbs = 50;
    double nic_path_gbs = 48;
    // NCCL's network post overhead per step (2 µs on AMD hosts, 1 on Intel) and its LL cap
    // across nodes follow the host CPU: DGX A100 has AMD EPYC, DGX H100 Intel Xeon.
    bool amd_host = false;
    // NVSwitches that reduce (NVLink SHARP, Hopper's third-generation NVSwitch), which NCCL uses
    // by default where the driver offers it.
    bool nvls = true;
    // What a call costs beyond the tuner's latency, as nccl-tests measures it at its smallest
    // sizes (bench/sim/collectives.md): the collective kernel's start after the one before it
    // on its stream (C0's 1 KiB, one process a GPU: 16.9 µs against the tuner's 15.0), and the
    // host's launch of one GPU's kernel, which a process that drives several GPUs pays for
    // each after the first, before the last GPU joins the ring (A2's 1 KiB: 36.1 µs for 8 GPUs
    // from one process against the tuner's 15.0 and the start's 1.9: 7 launches of 2.7). Both
    // measured on one system each and taken for both GPU generations.
    double call_overhead_us = 1.9;
    double host_launch_us = 2.7;

    double nvlink_gbs() const { return nvlink_links * nvlink_link_gbs; }  // a GPU's, all links
    // What one channel through a NIC carries: the slower of the NIC and its PCIe path.
    double nic_channel_gbs() const { return nic_gbs < nic_path_gbs ? nic_gbs : nic_path_gbs; }
};

// DGX H100 (and HGX H100 servers): ClusterNetwork's defaults.
inline constexpr ClusterNetwork kDgxH100Network{};
// DGX A100: 12 NVLinks of 20 GB/s to the NVSwitches, 8 HDR NICs of 25 GB/s behind PCIe Gen4
// x16 (24 GB/s), AMD EPYC hosts, no NVLink SHARP.
inline constexpr ClusterNetwork kDgxA100Network{.generation = GpuGeneration::ampere,
                                                .gpus_per_node = 8,
                                                .nvlink_links = 12,
                                                .nvlink_link_gbs = 20,
                                                .nics_per_node = 8,
                                                .nic_gbs = 25,
                                                .nic_path_gbs = 24,
                                                .amd_host = true,
                                                .nvls = false};

// The channels and per-channel bandwidths (GB/s) of one NCCL graph, as the search finds them.
struct NcclGraph {
    int channels = 1;
    double bw_intra = 0;  // within a node
    double bw_inter = 0;  // across nodes
};

// NCCL's ring and tree graphs for a group placed as `group` is (NCCL's search, §4 of
// docs/simulate.md's collective section): 12 channels of 20 GB/s within a DGX A100, 12 of 30
// within a DGX H100; across nodes one channel a NIC the group has.
struct NcclGraphs {
    NcclGraph ring, tree;
    int runtime_channels = 2;  // the communicator's channels (2 × the graph's; Hopper more)
};
NcclGraphs nccl_graphs(const GroupPlacement& group, const ClusterNetwork& network);

// One algorithm and protocol's price for a group: time = latency_us + bytes / (1000 ·
// algorithm_gbs), before the size-dependent corrections nccl_time applies.
struct NcclPrice {
    NcclAlgorithm algorithm = NcclAlgorithm::ring;
    NcclProtocol protocol = NcclProtocol::simple;
    double latency_us = 0;
    double bus_gbs = 0;        // nccl-tests' busbw of the large-message limit
    double algorithm_gbs = 0;  // bytes / time of the bandwidth term
};

// What NCCL's tuner chose for one call, and its time.
struct NcclEstimate {
    NcclAlgorithm algorithm = NcclAlgorithm::ring;
    NcclProtocol protocol = NcclProtocol::simple;
    double time_us = 0;
};

// The price of `collective` on `group` under one algorithm and protocol; algorithm_gbs 0 where
// NCCL does not offer it (tree is all-reduce's only).
NcclPrice nccl_price(Collective collective, const GroupPlacement& group,
                     const ClusterNetwork& network, NcclAlgorithm algorithm, NcclProtocol protocol);

// A send from one rank to another placed as `pair` is (placement.h's place_pipeline_pair): a
// GPU's NVLinks within a node; across nodes the pair's share of the node's NICs (all ranks of
// a stage send at once), at the slower of NIC and PCIe path. GB/s.
double send_gbs(const GroupPlacement& pair, const ClusterNetwork& network);

// An all-to-all over `group` (NCCL runs it as grouped sends and receives, one to each peer at
// once): each rank sends (n − 1)/n of its buffer, the share for peers on its node over its
// NVLinks and the rest through its share of the node's NICs (every rank of the node's groups
// sends at once), both at the same time. Nanoseconds a byte of the buffer; 0 for one rank.
double all_to_all_ns_per_byte(const GroupPlacement& group, const ClusterNetwork& network);

// One collective of one kind of group as NCCL runs it, priced once (as NCCL's tuner fills its
// table when the communicator is made) for every algorithm and protocol it offers; each call
// then only chooses by its size.
struct NcclCall {
    Collective collective = Collective::all_reduce;
    GroupPlacement group;
    std::vector<NcclPrice> prices{};  // those NCCL offers this group; none for one rank
    int runtime_channels = 2;         // NcclGraphs::runtime_channels
    double call_overhead_us = 0;      // the network's (ClusterNetwork)
    double host_launch_us = 0;
};
NcclCall nccl_call(Collective collective, const GroupPlacement& group,
                   const ClusterNetwork& network);

// The time of one call moving `bytes`, as NCCL's tuner picks it: the lowest time over the
// call's prices, with tree all-reduce's bandwidth correction by size and the ring's latency
// plateau across nodes (tuning.cc, ncclTopoGetAlgoTime). A group of one rank costs nothing.
NcclEstimate nccl_time(const NcclCall& call, double bytes);
NcclEstimate nccl_time(Collective collective, double bytes, const GroupPlacement& group,
                       const ClusterNetwork& network);

// The call's time as a run measures it: the tuner's (nccl_time) and the kernel's start; where
// one process launches the kernels of `gpus_a_process` GPUs in turn (nccl-tests' -g), the
// launches before the last GPU's too. A group of one rank costs nothing.
NcclEstimate nccl_call_time(const NcclCall& call, double bytes, int gpus_a_process = 1);

}  // namespace fulcrum::parallel
