// bench_collectives: NCCL's price of a collective (core/parallel/nccl_model.h) against
// published nccl-tests curves of the same systems, one process per GPU or one per node as each
// says, from 1 KiB to 1 GiB: a call as a run measures it (nccl_call_time: the tuner's time, the
// kernel's start, one process's launches), the tuner alone, and the simulator's price before
// issue 35 (the preset's NVLink or per-GPU network bandwidth and a fixed 10 µs a call, ring
// bytes), the baseline. Prints, for each curve, the published time, the call's and the
// baseline's and their errors at eight sizes (every size with --all-sizes), then how many of the
// curve's 21 sizes each model has within 15% and the mean |error|.
// Sources: bench/sim/collectives.md (where each curve was published, and on what).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/parallel/nccl_model.h"
#include "core/sim/hardware.h"
#include "core/util/text_table.h"

using namespace fulcrum;
using parallel::ClusterNetwork;
using parallel::Collective;
using parallel::GpuGeneration;
using parallel::GroupPlacement;

namespace {

struct Point {
    double bytes;
    double time_us;  // nccl-tests' out-of-place time
};

// nccl-tests rows (size, out-of-place time in µs), 1 KiB to 1 GiB, copied from the sources
// bench/sim/collectives.md names.
// A2_sb_ndv4_ar.txt
constexpr Point k_a2_all_reduce[] = {
    {1024, 36.07},        {2048, 35.42},       {4096, 35.92},       {8192, 35.91},
    {16384, 36.18},       {32768, 36.65},      {65536, 37.82},      {131072, 41.19},
    {262144, 47.53},      {524288, 60.32},     {1048576, 74.78},    {2097152, 93.48},
    {4194304, 112},       {8388608, 162},      {16777216, 226},     {33554432, 374.3},
    {67108864, 584.5},    {134217728, 1162.2}, {268435456, 2112.2}, {536870912, 4200.3},
    {1073741824, 8159.5},
};
// A2_sb_ndv4_ag.txt
constexpr Point k_a2_all_gather[] = {
    {1024, 35.38},        {2048, 34.67},      {4096, 34.62},       {8192, 34.76},
    {16384, 34.8},        {32768, 34.54},     {65536, 36.34},      {131072, 40.18},
    {262144, 46.45},      {524288, 58.48},    {1048576, 72.95},    {2097152, 77.28},
    {4194304, 100.7},     {8388608, 123.5},   {16777216, 167.7},   {33554432, 265.8},
    {67108864, 379.7},    {134217728, 698.6}, {268435456, 1192.2}, {536870912, 2304.1},
    {1073741824, 4413.4},
};
// A2_sb_ndv4_rs.txt
constexpr Point k_a2_reduce_scatter[] = {
    {1024, 35.16},      {2048, 35.43},      {4096, 35.49},       {8192, 35.18},
    {16384, 35.27},     {32768, 35},        {65536, 36.78},      {131072, 40.71},
    {262144, 48.12},    {524288, 59.81},    {1048576, 72.37},    {2097152, 80.64},
    {4194304, 108.9},   {8388608, 147.3},   {16777216, 152.4},   {33554432, 240.5},
    {67108864, 356.1},  {134217728, 618.1}, {268435456, 1108.7}, {536870912, 2169},
    {1073741824, 4203},
};
// B3_oci_bmgpu48_2node.txt
constexpr Point k_b3_all_reduce[] = {
    {1024, 41.97},        {2048, 43.36},     {4096, 44.54},       {8192, 48.16},
    {16384, 49.4},        {32768, 49.66},    {65536, 51.69},      {131072, 54.86},
    {262144, 67.95},      {524288, 73.94},   {1048576, 85.58},    {2097152, 99.19},
    {4194304, 127},       {8388608, 174.3},  {16777216, 282.7},   {33554432, 452.3},
    {67108864, 821.7},    {134217728, 1542}, {268435456, 3042.7}, {536870912, 6436},
    {1073741824, 9187.8},
};
// C0_nvidia_exemplar_h100_1node.txt
constexpr Point k_c0_all_reduce[] = {
    {1024, 16.94},        {2048, 17.14},      {4096, 23.59},       {8192, 17.4},
    {16384, 17.93},       {32768, 19.33},     {65536, 19.54},      {131072, 19.89},
    {262144, 20.43},      {524288, 20.66},    {1048576, 27.37},    {2097152, 42.21},
    {4194304, 54.19},     {8388608, 83.04},   {16777216, 123.8},   {33554432, 199.3},
    {67108864, 324.7},    {134217728, 586.4}, {268435456, 1112.5}, {536870912, 2151},
    {1073741824, 4029.4},
};
// D1_309_2node_default.txt
constexpr Point k_d1_all_reduce[] = {
    {1024, 29.75},        {2048, 28.19},      {4096, 30.24},       {8192, 32.12},
    {16384, 32.74},       {32768, 34.1},      {65536, 33.84},      {131072, 38.77},
    {262144, 48.67},      {524288, 77.69},    {1048576, 71.93},    {2097152, 76.24},
    {4194304, 94.38},     {8388608, 132.6},   {16777216, 185.4},   {33554432, 267.9},
    {67108864, 466.1},    {134217728, 748.3}, {268435456, 1282.8}, {536870912, 2357.6},
    {1073741824, 4484.9},
};
// D2_309_4node_default.txt
constexpr Point k_d2_all_reduce[] = {
    {1024, 39.79},        {2048, 39.59},      {4096, 42.18},     {8192, 46.84},
    {16384, 48.51},       {32768, 49.13},     {65536, 50.83},    {131072, 55.87},
    {262144, 67.82},      {524288, 72.88},    {1048576, 82.17},  {2097152, 191.3},
    {4194304, 151.1},     {8388608, 217.3},   {16777216, 259.6}, {33554432, 376},
    {67108864, 579.1},    {134217728, 990.7}, {268435456, 1768}, {536870912, 3109},
    {1073741824, 5808.8},
};

// DGX A100 and its like (Azure's NDv4 is built alike), and DGX H100 and HGX H100 servers: the
// presets' links (core/parallel/nccl_model.h).
using parallel::kDgxA100Network;
using parallel::kDgxH100Network;
// OCI's BM.GPU4.8: DGX A100's GPUs with 16 RoCE NICs of 100 Gb/s (12.5 GB/s).
constexpr ClusterNetwork kOciA100 = [] {
    ClusterNetwork oci = kDgxA100Network;
    oci.nics_per_node = 16;
    oci.nic_gbs = 12.5;
    return oci;
}();

struct Curve {
    const char* name;
    const char* system;
    const char* preset;  // the simulator's preset for the baseline
    Collective collective;
    GroupPlacement group;
    const ClusterNetwork* network;
    std::vector<Point> points;
    int gpus_a_process = 1;  // nccl-tests' -g: GPUs one process launches in turn
};

template <std::size_t N>
std::vector<Point> points(const Point (&rows)[N]) {
    return {rows, rows + N};
}

// The simulator's price before issue 35, as it still plays a flat system: the collective of a
// TP group of the curve's ranks on the preset's links without their NCCL description, rings at
// its NVLink bandwidth within a node or its per-GPU network bandwidth across, plus a fixed
// latency a call (core/sim/stage_costs.cpp, the flat rings).
analysis::CollectiveCost baseline_cost(const Curve& curve, sim::HardwareAssumptions hardware) {
    hardware.network.reset();
    const int ranks = curve.group.ranks;
    const analysis::CostModel model = sim::analytic_cost_model(
        {.hidden = 64 * ranks, .heads = ranks}, {.grid = {.tp = ranks}}, hardware);
    const std::string_view name = curve.collective == Collective::all_reduce ? sim::kTpAllReduce
                                  : curve.collective == Collective::all_gather
                                      ? sim::kTpAllGather
                                      : sim::kTpReduceScatter;
    return *model.collective(name);
}

std::string fixed(double value, int decimals) {
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
    return buffer;
}

std::string percent(double predicted, double published) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%+.0f%%", 100 * (predicted - published) / published);
    return buffer;
}

// How many sizes of a curve one model prices within 15% of the published time, and the sum of
// its |error|s.
struct Tally {
    int within = 0;
    double error_sum = 0;

    void add(double predicted, double published) {
        const double error = std::abs(predicted - published) / published;
        within += error <= 0.15;
        error_sum += error;
    }
    void add(const Tally& other) {
        within += other.within;
        error_sum += other.error_sum;
    }
    std::string within_of(int sizes) const {
        return std::to_string(within) + "/" + std::to_string(sizes);
    }
    std::string mean_of(int sizes) const { return fixed(100 * error_sum / sizes, 1) + "%"; }
};

std::string size_name(double bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB"};
    int unit = 0;
    while (bytes >= 1024 && unit < 3) {
        bytes /= 1024;
        ++unit;
    }
    return fixed(bytes, 0) + " " + units[unit];
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{
        "bench_collectives: NCCL's price of a collective against seven published nccl-tests "
        "curves (bench/sim/collectives.md), with NCCL's tuner alone and the simulator's price "
        "before issue 35 beside it"};
    bool all_sizes = false;
    app.add_flag("--all-sizes", all_sizes, "Print every size of each curve, not eight");
    CLI11_PARSE(app, argc, argv);
    const GroupPlacement one_node{.ranks = 8, .nodes = 1, .ranks_per_node = 8};
    const GroupPlacement two_nodes{.ranks = 16, .nodes = 2, .ranks_per_node = 8};
    const GroupPlacement four_nodes{.ranks = 32, .nodes = 4, .ranks_per_node = 8};
    const std::vector<Curve> curves = {
        {"A2 all-reduce", "8 A100 (Azure NDv4), one process", "a100", Collective::all_reduce,
         one_node, &kDgxA100Network, points(k_a2_all_reduce), 8},
        {"A2 all-gather", "8 A100 (Azure NDv4), one process", "a100", Collective::all_gather,
         one_node, &kDgxA100Network, points(k_a2_all_gather), 8},
        {"A2 reduce-scatter", "8 A100 (Azure NDv4), one process", "a100",
         Collective::reduce_scatter, one_node, &kDgxA100Network, points(k_a2_reduce_scatter), 8},
        {"B3 all-reduce", "2 x 8 A100 (OCI, 16 x 100G RoCE)", "a100", Collective::all_reduce,
         two_nodes, &kOciA100, points(k_b3_all_reduce)},
        {"C0 all-reduce", "8 H100 (NVIDIA's recipe)", "h100", Collective::all_reduce, one_node,
         &kDgxH100Network, points(k_c0_all_reduce)},
        {"D1 all-reduce", "2 x 8 H100 (8 x NDR)", "h100", Collective::all_reduce, two_nodes,
         &kDgxH100Network, points(k_d1_all_reduce)},
        {"D2 all-reduce", "4 x 8 H100 (8 x NDR)", "h100", Collective::all_reduce, four_nodes,
         &kDgxH100Network, points(k_d2_all_reduce)},
    };
    const std::vector<double> shown = {1 << 10, 1 << 13, 1 << 16, 1 << 20,
                                       1 << 23, 1 << 26, 1 << 28, 1 << 30};
    using Align = TextTable::Align;
    TextTable summary({"curve", "system", "sizes", "NCCL model within 15%", "mean |error|",
                       "tuner alone", "mean |error|", "baseline within 15%", "mean |error|"},
                      {Align::left, Align::left, Align::right, Align::right, Align::right,
                       Align::right, Align::right, Align::right, Align::right});
    int all_points = 0;
    Tally all_model, all_tuner, all_baseline;
    for (const Curve& curve : curves) {
        auto hardware = sim::hardware_preset(curve.preset);
        if (!hardware) {
            std::fprintf(stderr, "bench_collectives: %s\n", hardware.error().message.c_str());
            return 1;
        }
        const analysis::CollectiveCost baseline = baseline_cost(curve, *hardware);
        TextTable table(
            {"size", "published us", "NCCL model", "choice", "error", "baseline", "error"},
            {Align::right, Align::right, Align::right, Align::left, Align::right, Align::right,
             Align::right});
        Tally model_tally, tuner_tally, baseline_tally;
        const parallel::NcclCall call =
            parallel::nccl_call(curve.collective, curve.group, *curve.network);
        for (const Point& point : curve.points) {
            // A call as a run measures it (the kernel's start, one process's launches), and
            // NCCL's tuner alone.
            const parallel::NcclEstimate model =
                parallel::nccl_call_time(call, point.bytes, curve.gpus_a_process);
            const double base = 1e-3 * static_cast<double>(sim::predict_collective_ns(
                                           baseline, static_cast<std::int64_t>(point.bytes)));
            model_tally.add(model.time_us, point.time_us);
            tuner_tally.add(parallel::nccl_time(call, point.bytes).time_us, point.time_us);
            baseline_tally.add(base, point.time_us);
            if (all_sizes || std::find(shown.begin(), shown.end(), point.bytes) != shown.end()) {
                table.add_row({size_name(point.bytes), fixed(point.time_us, 1),
                               fixed(model.time_us, 1),
                               std::string(parallel::nccl_algorithm_name(model.algorithm)) + "/" +
                                   parallel::nccl_protocol_name(model.protocol),
                               percent(model.time_us, point.time_us), fixed(base, 1),
                               percent(base, point.time_us)});
            }
        }
        const int n = static_cast<int>(curve.points.size());
        all_points += n;
        all_model.add(model_tally);
        all_tuner.add(tuner_tally);
        all_baseline.add(baseline_tally);
        std::printf("%s: %s, %d ranks on %d node%s\n%s\n", curve.name, curve.system,
                    curve.group.ranks, curve.group.nodes, curve.group.nodes > 1 ? "s" : "",
                    table.render("  ").c_str());
        summary.add_row({curve.name, curve.system, std::to_string(n), model_tally.within_of(n),
                         model_tally.mean_of(n), tuner_tally.within_of(n), tuner_tally.mean_of(n),
                         baseline_tally.within_of(n), baseline_tally.mean_of(n)});
    }
    std::printf("%s", summary.render().c_str());
    std::printf(
        "all curves: NCCL model within 15%% at %d of %d sizes, NCCL's tuner alone at %d, "
        "baseline at %d\n",
        all_model.within, all_points, all_tuner.within, all_baseline.within);
    return 0;
}
