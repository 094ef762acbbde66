#!/usr/bin/env python3
"""The h100 preset's measured tables (core/sim/hardware.cpp) from measure_gpu_kernels.py's
output (bench/sim/gpu_kernels_h200.json): no fitting to any published run, only medians of
what the kernels did.

  GEMMs      every measured bf16 GEMM (the validation set's shapes in their three layouts,
             squares, few-token GEMMs), grouped by size in half-decades of FLOPs: each group's
             median efficiency (of the 989 TFLOP/s dense peak) at its median size;
  attention  cuDNN's fused causal attention (Transformer Engine's), every measured call,
             grouped likewise by the forward's FLOPs: the forward's and the backward's median
             efficiency, the backward counted as 2.5 forwards (FlashAttention-2, Dao 2023, §3:
             five matrix products against two);
  HBM        the elementwise kernels' useful bandwidth as a share of the device's peak.

  python3 bench/sim/fit_gpu_tables.py [bench/sim/gpu_kernels_h200.json] [--peak-gbs 4800]
"""
import argparse
import json
import math
import statistics

PEAK_TFLOPS = 989.0


def grouped(points):
    """(gflops, value) points in half-decade groups: (median gflops, median value, count)."""
    groups = {}
    for gflops, value in points:
        groups.setdefault(math.floor(2 * math.log10(gflops)), []).append((gflops, value))
    return [(statistics.median(g for g, _ in group), statistics.median(v for _, v in group),
             len(group)) for _, group in sorted(groups.items())]


def table_line(name, rows):
    return f"{name} = {{" + ", ".join(f"{{{g:.3g}, {v:.3f}}}" for g, v, _ in rows) + "};"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("measured", nargs="?", default="bench/sim/gpu_kernels_h200.json")
    parser.add_argument("--peak-gbs", type=float, default=4800.0,
                        help="the measured device's HBM peak, GB/s (H200: 4800)")
    args = parser.parse_args()
    with open(args.measured) as file:
        report = json.load(file)

    gemms, seen = [], set()
    for entry in report["gemms"] + report["squares"] + report.get("ladder", []):
        key = (entry["m"], entry["n"], entry["k"], entry["layout"])
        if key not in seen:
            seen.add(key)
            gemms.append((entry["gflops"], entry["tflops"] / PEAK_TFLOPS))
    gemm_rows = grouped(gemms)
    print(f"GEMMs: {len(gemms)} distinct shapes and layouts on {report['device']}")
    for g, v, n in gemm_rows:
        print(f"  {g:10.3g} GFLOP  {v:.3f} of peak  ({n} GEMMs)")
    print("  " + table_line("gemm_efficiency", gemm_rows))

    forward, backward = [], []
    for entry in report["attention"] + report.get("attention_grid", []):
        if entry.get("backend") != "cudnn" or "error" in entry:
            continue
        flops = 2 * 2.0 * entry["microbatch"] * entry["heads"] * entry["sequence"] ** 2 * \
            entry["head_dim"] / 2
        forward.append((flops * 1e-9, flops / entry["forward_s"] * 1e-12 / PEAK_TFLOPS))
        backward.append((flops * 1e-9,
                         2.5 * flops / entry["backward_s"] * 1e-12 / PEAK_TFLOPS))
    print(f"\ncuDNN fused causal attention: {len(forward)} calls, by the forward's GFLOP")
    forward_rows, backward_rows = grouped(forward), grouped(backward)
    for (g, f, n), (_, b, _) in zip(forward_rows, backward_rows):
        print(f"  {g:10.3g} GFLOP  forward {f:.3f}, backward {b:.3f} of peak  ({n} calls)")
    print("  " + table_line("attention_forward_efficiency", forward_rows))
    print("  " + table_line("attention_backward_efficiency", backward_rows))

    print(f"\nelementwise kernels, share of {args.peak_gbs:.0f} GB/s")
    kernels = {}
    for entry in report.get("elementwise", []):
        kernels.setdefault(entry["kernel"], []).append(entry["gbs"] / args.peak_gbs)
    for kernel, shares in kernels.items():
        print(f"  {kernel:20} median {statistics.median(shares):.2f} "
              f"({min(shares):.2f}-{max(shares):.2f})")


if __name__ == "__main__":
    main()
