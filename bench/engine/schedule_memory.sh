#!/usr/bin/env bash
# Peak memory of rank 0 under each pipeline schedule and memory knob of fulcrum-train (issue
# 25: "the engine's counted peak memory falls as the memory model says it must"), as ratios to
# the plain layout in the same run: recomputation against none on one rank, sequence
# parallelism against plain TP on two, and GPipe, interleaved 1F1B and ZB-H1 against 1F1B on
# two stages. "peak" is the backend's count of its allocations (host memory standing in for
# the device on the CPU backend); the step time says what the knob costs there.
# Usage: bench/engine/schedule_memory.sh [BUILD_DIR]   (~2 min on 2 cores)
set -euo pipefail
build="${1:-build}"
source "$(dirname "${BASH_SOURCE[0]}")/../common/runs.sh"
steps=2
model=(--steps "$steps" --layers 4 --hidden 256 --heads 8 --context 1024
       --lengths long-tail:context=1024,median=256 --documents 256 --micro-batches 4)
field() { sed -n "$1" | head -1; }
# Sets peak and per_step from one run of `ranks` ranks.
measure() {
    local ranks="$1" output seconds
    shift
    if [[ "$ranks" == 1 ]]; then
        output="$("$build/engine/fulcrum-train" "${model[@]}" "$@" 2>&1)"
    else
        output="$(mpirun -np "$ranks" "$build/engine/fulcrum-train" "${model[@]}" "$@" 2>&1)"
    fi
    peak="$(echo "$output" | field 's/^memory on rank 0: peak \([0-9.]*\) MiB.*/\1/p')"
    seconds="$(echo "$output" | field 's/^done: \([0-9]*\) steps, \([0-9.]*\) s.*/\2/p')"
    [[ -n "$peak" && -n "$seconds" ]] || { echo "$output" >&2; exit 1; }
    per_step="$(awk -v s="$seconds" -v n="$steps" 'BEGIN { printf "%.2f", s / n }')"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
row() { printf '%-6s %-38s %10s %9s %8s %9s\n' "$@"; }

row ranks layout "peak MiB" "vs base" s/step "vs base"
# One rank: recomputation.
measure 1 --recompute none
base_peak="$peak" base_step="$per_step"
row 1 "recompute none (base)" "$peak" 1.000 "$per_step" 1.000
for mode in selective full; do
    measure 1 --recompute "$mode"
    row 1 "recompute $mode" "$peak" "$(ratio "$peak" "$base_peak")" "$per_step" "$(ratio "$per_step" "$base_step")"
done
# Two TP ranks: sequence parallelism.
measure 2 --tp 2
base_peak="$peak" base_step="$per_step"
row 2 "tp2 (base)" "$peak" 1.000 "$per_step" 1.000
measure 2 --tp 2 --sequence-parallel
row 2 "tp2 + sequence parallel" "$peak" "$(ratio "$peak" "$base_peak")" "$per_step" "$(ratio "$per_step" "$base_step")"
measure 2 --tp 2 --sequence-parallel --recompute selective
row 2 "tp2 + sequence parallel + selective" "$peak" "$(ratio "$peak" "$base_peak")" "$per_step" "$(ratio "$per_step" "$base_step")"
# Two stages: schedules.
measure 2 --pp 2 --schedule 1f1b
base_peak="$peak" base_step="$per_step"
row 2 "pp2 1f1b (base)" "$peak" 1.000 "$per_step" 1.000
for schedule in gpipe "interleaved --virtual-stages 2" zb-h1; do
    # shellcheck disable=SC2086
    measure 2 --pp 2 --schedule $schedule
    row 2 "pp2 ${schedule/ --virtual-stages /, v }" "$peak" "$(ratio "$peak" "$base_peak")" "$per_step" "$(ratio "$per_step" "$base_step")"
done
