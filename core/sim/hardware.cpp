#include "core/sim/hardware.h"

#include <string>

namespace fulcrum::sim {
namespace {

// NVIDIA A100 80 GB SXM in DGX A100 nodes (8 GPUs on NVSwitch, 8 × 200 Gb/s HDR InfiniBand):
//   peak      312 TFLOP/s dense fp16/bf16 on tensor cores, 19.5 TFLOP/s fp32 (A100 datasheet);
//   GEMMs     the fraction of peak a cuBLAS GEMM reaches grows with its size: small GEMMs are
//             launch- and wave-quantisation-bound, large ones reach ~85% (NVIDIA's "Matrix
//             Multiplication Background" guide: A100 fp16 GEMMs of 8192³ sustain ~270 of 312
//             TFLOP/s; 1024³, ~2 GFLOP, about half). Stated once for the device, not per run;
//   attention the unfused Megatron-LM kernels of 2022 (QKᵀ and score·V as batched GEMMs of
//             head size 128, full s × s square, fused softmax): half of peak;
//   HBM2e     2039 GB/s, 80% achieved by elementwise kernels;
//   NVLink 3  300 GB/s a direction per GPU, collectives 80% of it (NCCL's bus bandwidth on a
//             DGX A100 all-reduce is ~230–240 GB/s);
//   network   25 GB/s a GPU (one 200 Gb/s HDR NIC each), 80% of it;
//   latency   10 µs a collective call, 10 µs launches a layer and forward.
HardwareAssumptions a100() {
    HardwareAssumptions a100;
    a100.preset = "a100";
    a100.tflops = 312;
    a100.fp32_tflops = 19.5;
    a100.gemm_efficiency = {{0.1, 0.15}, {1, 0.45}, {10, 0.70}, {100, 0.80}, {1000, 0.85}};
    a100.attention_efficiency = 0.5;
    a100.attention_full_square = true;
    a100.hbm_gbs = 2039 * 0.8;
    a100.nvlink_gbs = 300 * 0.8;
    a100.network_gbs = 25 * 0.8;
    a100.collective_latency_us = 10;
    a100.p2p_latency_us = 10;
    a100.layer_overhead_us = 10;
    a100.gpus_per_node = 8;
    // DGX A100 as NCCL sees it (core/parallel/nccl_model.h): 12 NVLinks of 20 GB/s to the
    // NVSwitches, 8 HDR NICs of 25 GB/s behind PCIe Gen4 x16 (24 GB/s), AMD EPYC hosts.
    a100.network = parallel::ClusterNetwork{.generation = parallel::GpuGeneration::ampere,
                                            .gpus_per_node = 8,
                                            .nvlink_links = 12,
                                            .nvlink_link_gbs = 20,
                                            .nics_per_node = 8,
                                            .nic_gbs = 25,
                                            .nic_path_gbs = 24,
                                            .amd_host = true,
                                            .nvls = false};
    return a100;
}

}  // namespace

Result<HardwareAssumptions> hardware_preset(std::string_view name) {
    if (name == "h100") {
        HardwareAssumptions h100;
        h100.preset = "h100";
        // DGX H100 as NCCL sees it: 18 NVLinks of 20.6 GB/s with NVLink SHARP, 8 NDR NICs of
        // 50 GB/s behind PCIe Gen5 x16 (48 GB/s), Intel Xeon hosts (ClusterNetwork's defaults).
        h100.network = parallel::ClusterNetwork{};
        return h100;
    }
    if (name == "a100") {
        return a100();
    }
    return Error{ErrorCode::invalid_input, "unknown --hardware '" + std::string(name) +
                                               "' (choose " + std::string(kHardwarePresets) + ")"};
}

}  // namespace fulcrum::sim
