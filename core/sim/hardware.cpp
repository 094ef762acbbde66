#include "core/sim/hardware.h"

#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace fulcrum::sim {
namespace {

// NVIDIA A100 80 GB SXM in DGX A100 nodes (8 GPUs on NVSwitch, 8 × 200 Gb/s HDR InfiniBand):
//   peak      312 TFLOP/s dense fp16/bf16 on tensor cores, 19.5 TFLOP/s fp32 (A100 datasheet);
//   GEMMs     the fraction of peak a cuBLAS GEMM reaches grows with its size: small GEMMs are
//             launch- and wave-quantisation-bound, large ones level off. The curve's shape is
//             NVIDIA's "Matrix Multiplication Background" guide (square fp16 GEMMs: 8192³ at
//             ~270 of 312 TFLOP/s, 1024³, ~2 GFLOP, about half); its level is the one measured
//             A100 layer public runs give, Korthikanti et al. 2022's Table 4 (the 22B's layer
//             at TP 8, five variants' forward and backward): the least-squares fit of those ten
//             passes puts the guide's square GEMMs at 0.91 of their rate, the largest at 0.77 of
//             peak (training shapes do less than square ones: on an H100 the measured table
//             below tops out at 0.73, where the best shape found reaches 0.80). Stated once for
//             the device, not per run (bench/README.md, "The a100 preset's GEMMs read off the
//             one measured A100 layer");
//   attention FlashAttention-2 (Dao 2023, §4: forward and backward together 50–73% of peak on
//             A100, causal head size 128 near the low end): 0.6 of peak on the causal pairs;
//             the unfused Megatron-LM kernels of 2022 (QKᵀ and score·V as batched GEMMs of
//             head size 128, full s × s square, fused softmax): half of peak;
//   HBM2e     2039 GB/s, 80% achieved by elementwise kernels;
//   NVLink 3  300 GB/s a direction per GPU, collectives 80% of it (NCCL's bus bandwidth on a
//             DGX A100 all-reduce is ~230–240 GB/s);
//   network   25 GB/s a GPU (one 200 Gb/s HDR NIC each), 80% of it;
//   latency   10 µs a collective call, 10 µs launches a layer and forward;
//   SMs       108 (A100 datasheet), of which NCCL's kernels hold one a channel.
HardwareAssumptions a100() {
    HardwareAssumptions a100;
    a100.preset = "a100";
    a100.tflops = 312;
    a100.fp32_tflops = 19.5;
    a100.gemm_efficiency = {{0.1, 0.14}, {1, 0.41}, {10, 0.64}, {100, 0.73}, {1000, 0.77}};
    a100.attention_efficiency = 0.6;
    a100.unfused_attention_efficiency = 0.5;
    a100.hbm_gbs = 2039 * 0.8;
    a100.nvlink_gbs = 300 * 0.8;
    a100.network_gbs = 25 * 0.8;
    a100.collective_latency_us = 10;
    a100.p2p_latency_us = 10;
    a100.layer_overhead_us = 10;
    a100.gpus_per_node = 8;
    a100.host_link_gbs = 24;  // PCIe Gen4 x16
    a100.sms = 108;
    a100.network = parallel::kDgxA100Network;  // its links as NCCL sees them
    return a100;
}

// NVIDIA H100 80 GB SXM in DGX H100 nodes (8 GPUs on NVSwitch with NVLink SHARP, 8 × 400 Gb/s
// NDR InfiniBand):
//   peak      989 TFLOP/s dense bf16/fp16 on tensor cores, 67 TFLOP/s fp32 (H100 datasheet);
//   GEMMs     measured on an H200 (bench/sim/gpu_kernels_h200.json, 2026-11-30): the same
//             GH100 chip, 132 SMs at the same 1980 MHz boost and the same 989 TFLOP/s, with
//             faster HBM (4.8 against 3.35 TB/s), which compute-bound GEMMs do not use. cuBLAS
//             bf16 GEMMs of the validation set's shapes in their forward, input-gradient and
//             weight-gradient layouts, square ones and few-token ones, 370 in all, L2 flushed
//             between calls; each half-decade of sizes at its median. The largest reach 0.70–
//             0.73 of peak (Bekman, "Machine Learning Engineering", Maximum Achievable Matmul
//             FLOPS, has 794.5 of 989 for the best shape found by a search; the shapes training
//             runs have do less); a GEMM of 2 GFLOP 0.13, of 20 GFLOP 0.54;
//   attention fused: cuDNN's causal kernel (Transformer Engine's) measured on that H200 from
//             0.5 to 4,400 GFLOP a call, head sizes 64–160: forward 0.04–0.63 of peak, backward
//             (2.5 forwards of FLOPs) 0.02–0.54, by the call's size (a call of one sequence of
//             4K tokens and 16 heads of 128: 0.46 and 0.35; Shah et al. 2024, §4.1, report
//             FlashAttention-3 at 500–660 TFLOP/s forward on calls of 16K tokens); the unfused
//             kernels of 2022 half of the fused kernel's rate of 0.5;
//   HBM3      3350 GB/s, 80% achieved by elementwise kernels;
//   NVLink 4  450 GB/s a direction per GPU, 80% of it on flat rings; network 50 GB/s a GPU
//             (one 400 Gb/s NDR NIC each), 80% of it; the described network below prices both;
//   latency   10 µs a collective call, a pipeline hand-over and a layer's launches;
//   SMs       132 (H100 SXM5 datasheet).
HardwareAssumptions h100() {
    HardwareAssumptions h100;
    h100.preset = "h100";
    h100.tflops = 989;
    h100.fp32_tflops = 67;
    // Measured: bench/sim/fit_gpu_tables.py over bench/sim/gpu_kernels_h200.json.
    h100.gemm_efficiency = {{0.0336, 0.006}, {0.268, 0.044}, {2.15, 0.134}, {8.59, 0.287},
                            {19.3, 0.543},   {53.7, 0.678},  {137, 0.733},  {550, 0.709},
                            {1340, 0.707},   {7370, 0.702}};
    h100.attention_efficiency = 0.5;
    // Measured likewise: cuDNN's fused causal attention (Transformer Engine's kernel), the
    // forward's and the backward's share of peak by the forward's GFLOP of one call.
    h100.attention_forward_efficiency = {{0.537, 0.035}, {2.15, 0.088}, {8.59, 0.203},
                                         {17.2, 0.321},  {51.5, 0.406}, {206, 0.444},
                                         {550, 0.462},   {1100, 0.619}, {4400, 0.633}};
    h100.attention_backward_efficiency = {{0.537, 0.016}, {2.15, 0.067}, {8.59, 0.176},
                                          {17.2, 0.229},  {51.5, 0.309}, {206, 0.380},
                                          {550, 0.440},   {1100, 0.510}, {4400, 0.540}};
    h100.unfused_attention_efficiency = 0.25;
    h100.hbm_gbs = 3350 * 0.8;
    h100.nvlink_gbs = 450 * 0.8;
    h100.network_gbs = 50 * 0.8;
    h100.collective_latency_us = 10;
    h100.p2p_latency_us = 10;
    h100.layer_overhead_us = 10;
    h100.gpus_per_node = 8;
    h100.host_link_gbs = 48;  // PCIe Gen5 x16
    h100.sms = 132;
    // DGX H100's links as NCCL sees them: 18 NVLinks of 20.6 GB/s with NVLink SHARP, 8 NDR
    // NICs of 50 GB/s behind PCIe Gen5 x16 (48 GB/s), Intel Xeon hosts.
    h100.network = parallel::kDgxH100Network;
    return h100;
}

// A system of the user's own (docs/simulate.md, "A system of your own"): a JSON object that may
// start from a preset ("base") and sets fields by name; every key is checked, so a misspelt
// one is an error rather than a default silently kept.
Result<HardwareAssumptions> hardware_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) {
        return Error{ErrorCode::invalid_input,
                     "--hardware '" + path + "': no such preset (h100, a100) or readable file"};
    }
    std::stringstream text;
    text << in.rdbuf();
    const auto json = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
    const auto invalid = [&](const std::string& what) {
        return Error{ErrorCode::invalid_input, "--hardware " + path + ": " + what +
                                                   " (docs/simulate.md, \"A system of your "
                                                   "own\")"};
    };
    if (!json.is_object()) {
        return invalid("not a JSON object");
    }
    HardwareAssumptions hardware;
    if (const auto base = json.find("base"); base != json.end()) {
        if (*base != "h100" && *base != "a100") {
            return invalid("\"base\" must name a preset (" + std::string(kHardwarePresets) + ")");
        }
        hardware = *hardware_preset(base->get<std::string>());
    }
    hardware.preset = path;
    using Setter = std::function<bool(const nlohmann::json&)>;
    const auto number = [](double& field) {
        return Setter([&field](const nlohmann::json& value) {
            if (!value.is_number() || value.get<double>() < 0) {
                return false;
            }
            field = value.get<double>();
            return true;
        });
    };
    const auto count = [](int& field) {
        return Setter([&field](const nlohmann::json& value) {
            if (!value.is_number_integer() || value.get<int>() < 1) {
                return false;
            }
            field = value.get<int>();
            return true;
        });
    };
    // [[GFLOP, share of peak], ...], sizes increasing.
    const auto efficiency_table = [](std::vector<GemmEfficiencyPoint>& field) {
        return Setter([&field](const nlohmann::json& value) {
            if (!value.is_array() || value.empty()) {
                return false;
            }
            std::vector<GemmEfficiencyPoint> table;
            for (const auto& point : value) {
                if (!point.is_array() || point.size() != 2 || !point[0].is_number() ||
                    !point[1].is_number() || point[0].get<double>() <= 0 ||
                    point[1].get<double>() <= 0 || point[1].get<double>() > 1 ||
                    (!table.empty() && point[0].get<double>() <= table.back().gflops)) {
                    return false;
                }
                table.push_back({point[0].get<double>(), point[1].get<double>()});
            }
            field = std::move(table);
            return true;
        });
    };
    const auto flag = [](bool& field) {
        return Setter([&field](const nlohmann::json& value) {
            if (!value.is_boolean()) {
                return false;
            }
            field = value.get<bool>();
            return true;
        });
    };
    const std::map<std::string, Setter> top = {
        {"tflops", number(hardware.tflops)},
        {"fp32_tflops", number(hardware.fp32_tflops)},
        {"hbm_gbs", number(hardware.hbm_gbs)},
        {"nvlink_gbs", number(hardware.nvlink_gbs)},
        {"network_gbs", number(hardware.network_gbs)},
        {"collective_latency_us", number(hardware.collective_latency_us)},
        {"p2p_latency_us", number(hardware.p2p_latency_us)},
        {"layer_overhead_us", number(hardware.layer_overhead_us)},
        {"gpus_per_node", count(hardware.gpus_per_node)},
        {"sms", count(hardware.sms)},
        {"host_link_gbs", number(hardware.host_link_gbs)},
        {"attention_efficiency", number(hardware.attention_efficiency)},
        {"unfused_attention_efficiency", number(hardware.unfused_attention_efficiency)},
        {"attention_backend", Setter([&hardware](const nlohmann::json& value) {
             if (value != "flash" && value != "unfused") {
                 return false;
             }
             hardware.unfused_attention = value == "unfused";
             return true;
         })},
        {"gemm_efficiency", efficiency_table(hardware.gemm_efficiency)},
        {"attention_forward_efficiency", efficiency_table(hardware.attention_forward_efficiency)},
        {"attention_backward_efficiency", efficiency_table(hardware.attention_backward_efficiency)},
    };
    for (const auto& [key, value] : json.items()) {
        if (key == "base" || key == "network") {
            continue;
        }
        const auto setter = top.find(key);
        if (setter == top.end()) {
            return invalid("unknown key \"" + key + "\"");
        }
        if (!setter->second(value)) {
            return invalid("\"" + key + "\" has a value of the wrong kind or range" +
                           (key == "attention_backend" ? " (flash or unfused)" : ""));
        }
    }
    // A share of peak stated for the fused kernel replaces the base's tables of it, unless
    // the file states those too.
    if (json.contains("attention_efficiency")) {
        if (!json.contains("attention_forward_efficiency")) {
            hardware.attention_forward_efficiency.clear();
        }
        if (!json.contains("attention_backward_efficiency")) {
            hardware.attention_backward_efficiency.clear();
        }
    }
    if (const auto network = json.find("network"); network != json.end()) {
        if (network->is_null()) {
            hardware.network.reset();  // flat rings at nvlink_gbs and network_gbs
        } else if (!network->is_object()) {
            return invalid("\"network\" must be an object, or null for flat rings");
        } else {
            parallel::ClusterNetwork links = hardware.network.value_or(parallel::ClusterNetwork{});
            const std::map<std::string, Setter> parts = {
                {"nvlink_links", count(links.nvlink_links)},
                {"nvlink_link_gbs", number(links.nvlink_link_gbs)},
                {"nics_per_node", count(links.nics_per_node)},
                {"nic_gbs", number(links.nic_gbs)},
                {"nic_path_gbs", number(links.nic_path_gbs)},
                {"amd_host", flag(links.amd_host)},
                {"nvls", flag(links.nvls)},
                {"call_overhead_us", number(links.call_overhead_us)},
                {"host_launch_us", number(links.host_launch_us)},
                {"gpu", Setter([&links](const nlohmann::json& value) {
                     if (value == "ampere" || value == "hopper") {
                         links.generation = value == "hopper" ? parallel::GpuGeneration::hopper
                                                              : parallel::GpuGeneration::ampere;
                         return true;
                     }
                     return false;
                 })},
            };
            for (const auto& [key, value] : network->items()) {
                const auto setter = parts.find(key);
                if (setter == parts.end()) {
                    return invalid("unknown key \"network." + key + "\"");
                }
                if (!setter->second(value)) {
                    return invalid("\"network." + key +
                                   "\" has a value of the wrong kind or range" +
                                   (key == "gpu" ? " (ampere or hopper)" : ""));
                }
            }
            hardware.network = links;
        }
    }
    if (hardware.network) {
        hardware.network->gpus_per_node = hardware.gpus_per_node;
    }
    return hardware;
}

}  // namespace

Result<HardwareAssumptions> hardware_preset(std::string_view name) {
    if (name == "h100") {
        return h100();
    }
    if (name == "a100") {
        return a100();
    }
    if (name.ends_with(".json") || name.find('/') != std::string_view::npos) {
        return hardware_file(std::string(name));
    }
    return Error{ErrorCode::invalid_input, "unknown --hardware '" + std::string(name) +
                                               "' (choose " + std::string(kHardwarePresets) +
                                               ", or a JSON file of your system)"};
}

}  // namespace fulcrum::sim
