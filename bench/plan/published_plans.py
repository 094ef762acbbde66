#!/usr/bin/env python3
"""fulcrum plan on published setups (issue 35): for each run of the validation set that chose
its own layout at scale (bench/sim/validation_set.h), plan the same model, world, global batch
and knobs the paper fixed (recomputation, the run's CP or none, fixed packing of whole
sequences) on the run's GPU preset, and print where the published grid (TP x PP x CP x DP) ranks
among the plan's, its simulated step time against the plan's first choice, and that choice.

    bench/plan/published_plans.py --build build [--top 32]

The plan ranks the layouts it plays in full (max(4 x --top, 32) of them); a published grid
outside those is reported as not played. bench/README.md records a run.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

# id, gpu, layers, hidden, heads, vocab, seq, tp, pp, v, dp, global batch, recompute, sp,
# dtype, and the software the run had: Megatron-LM of 2021 had neither FlashAttention nor the
# distributed optimizer, MegaScale's baseline of 2023 (commit 285068c8) ran without
# FlashAttention (an opt-in flag there), the later rows gather the distributed optimizer's
# parameters beside the next step's forward (the plan searches what that software ran)
# The DGX Cloud rows (L, T) also carry their CP degree and their layer's flags.
RUNS = [
    ("N4", "a100", 40, 6144, 48, 51200, 2048, 8, 1, 1, 32, 1024, "full", False, "fp16", "2021"),
    ("N5", "a100", 48, 8192, 64, 51200, 2048, 8, 2, 1, 32, 1536, "full", False, "fp16", "2021"),
    ("N6", "a100", 60, 10240, 80, 51200, 2048, 8, 4, 3, 32, 1792, "full", False, "fp16", "2021"),
    ("N7", "a100", 80, 12288, 96, 51200, 2048, 8, 8, 2, 24, 2304, "full", False, "fp16", "2021"),
    ("S1", "a100", 96, 12288, 128, 64000, 2048, 8, 8, 6, 4, 768, "selective", True, "bf16", "2023"),
    ("M5", "h100", 84, 8192, 64, 131072, 4096, 8, 2, 1, 48, 384, "none", True, "bf16", ""),
    ("M6", "h100", 92, 10240, 80, 131072, 4096, 8, 4, 1, 48, 768, "none", True, "bf16", ""),
    ("L3", "h100", 80, 8192, 64, 128256, 8192, 4, 4, 5, 2, 128, "none", True, "bf16", "", 2,
     ["--architecture", "llama", "--kv-heads", "8", "--ffn-hidden", "28672"]),
    ("L5", "h100", 126, 16384, 128, 128256, 8192, 8, 8, 8, 4, 256, "none", True, "bf16", "", 2,
     ["--architecture", "llama", "--kv-heads", "8", "--ffn-hidden", "53248"]),
    ("T3", "h100", 96, 18432, 96, 256000, 4096, 8, 8, 12, 4, 64, "none", True, "bf16", "", 1,
     ["--kv-heads", "8", "--ffn-hidden", "73728"]),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build", help="the build directory")
    parser.add_argument("--top", type=int, default=32, help="layouts printed by each plan")
    parser.add_argument("--plan-args", default="",
                        help="more options for every fulcrum plan, e.g. '--grad-reduce-dtype bf16' "
                             "to play a part of the model the other way (a baseline in the same run)")
    args = parser.parse_args()
    fulcrum = os.path.join(args.build, "app", "fulcrum")
    if not os.access(fulcrum, os.X_OK):
        sys.exit(f"published_plans.py: no {fulcrum}; build first (cmake --build {args.build})")
    print(f"{'run':4} {'GPUs':>5} {'published grid':22} {'rank':>9} {'published s':>11} "
          f"{'first s':>8} {'ratio':>6}  first choice")
    with tempfile.TemporaryDirectory() as tmp:
        for run in RUNS:
            (name, gpu, layers, hidden, heads, vocab, seq, tp, pp, v, dp, batch, recompute, sp,
             dtype, software) = run[:16]
            cp, layer_flags = (run[16], run[17]) if len(run) > 16 else (1, [])
            lengths = os.path.join(tmp, f"{seq}.txt")
            with open(lengths, "w") as out:
                out.write(f"{seq}\n" * batch)
            world = tp * pp * cp * dp
            command = [fulcrum, "plan", "--hardware", gpu, "--world", str(world), "--layers",
                       str(layers), "--hidden", str(hidden), "--heads", str(heads), "--context",
                       str(seq), "--vocab", str(vocab), "--dtype", dtype, "--global-batch",
                       str(batch), "--lengths", f"file:{lengths}", "--documents", str(batch),
                       "--balancers", "fixed", "--max-cp", str(cp), "--recomputes", recompute,
                       "--schedules", "1f1b,interleaved", "--top", str(args.top), "--json"]
            command += layer_flags
            if v > 1:  # the published virtual stages among those the plan tries
                command += ["--virtual-stages", ",".join(str(k) for k in sorted({2, 4, v}))]
            if not sp:
                command.append("--no-sequence-parallel")
            if software == "2021":
                command += ["--no-distributed-optimizer", "--attention-backend", "unfused"]
            elif software == "2023":
                command += ["--attention-backend", "unfused"]
            else:  # Megatron-Core's gather beside the next forward (the README's flags, NeMo's)
                command.append("--overlap-param-gather")
            command += shlex.split(args.plan_args)
            started = time.time()
            result = subprocess.run(command, capture_output=True, text=True)
            if result.returncode != 0:
                print(f"{name}: fulcrum plan failed: {result.stderr.strip()}")
                continue
            ranked = json.loads(result.stdout)["ranked"]
            first = ranked[0]
            match = next((c for c in ranked
                          if (c["tp"], c["pp"], c["dp"], c["cp"]) == (tp, pp, dp, cp)), None)
            grid = (f"tp{tp} pp{pp}{f' v{v}' if v > 1 else ''}{f' cp{cp}' if cp > 1 else ''}"
                    f" dp{dp}")
            choice = (f"tp{first['tp']} pp{first['pp']}"
                      f"{' cp' + str(first['cp']) if first['cp'] > 1 else ''} dp{first['dp']}"
                      f" {first['schedule']}"
                      f"{' x' + str(first.get('virtual_stages', 1)) if first['schedule'] == 'interleaved' else ''}"
                      f" m{first['microbatches']}")
            if match is None:
                print(f"{name:4} {world:5} {grid:22} {'not played':>9} {'—':>11} "
                      f"{first['step_ns'] / 1e9:8.2f} {'—':>6}  {choice}  ({time.time() - started:.0f} s)")
                continue
            ratio = match["step_ns"] / first["step_ns"]
            print(f"{name:4} {world:5} {grid:22} {match['rank']:>4} of {len(ranked):<3}"
                  f"{match['step_ns'] / 1e9:11.2f} {first['step_ns'] / 1e9:8.2f} {ratio:6.2f}  "
                  f"{choice}  ({time.time() - started:.0f} s)")


if __name__ == "__main__":
    main()
