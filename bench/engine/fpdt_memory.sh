#!/usr/bin/env bash
# FPDT's memory techniques in fulcrum-train (issue 38): each rank's measured peak of the CPU
# backend's counted allocations against the memory model's prediction for the same run
# (core/parallel/memory_model.h, engine_stage_memory, which fulcrum-train prints beside the
# peak), and against the run without the technique in the same script: ZeRO 0-3 over DP, a
# pipeline stage holding only its own layers, offloaded checkpoints, Ulysses against
# all-gather CP, and FPDT's engine design (chunks, Q/K/V and checkpoint offload) over both.
# Documents are exactly the context long, so every micro-batch is full and the prediction is
# for the micro-batches the run packs. "max" is the largest rank's; "pinned" the host memory
# the offloads use.
# Usage: bench/engine/fpdt_memory.sh [BUILD_DIR]   (~2.5 min on 2 cores)
set -euo pipefail
build="${1:-build}"
source "$(dirname "${BASH_SOURCE[0]}")/../common/runs.sh"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
context=512
for _ in $(seq 32); do echo "$context"; done > "$work/lengths.txt"
model=(--steps 2 --layers 8 --hidden 128 --heads 8 --context "$context"
       --lengths "file:$work/lengths.txt" --balancer fixed --micro-batches 4)

# Sets measured, predicted (the largest rank's each, MiB) and pinned from one run.
measure() {
    local ranks="$1" output
    shift
    output="$(mpirun -np "$ranks" "$build/engine/fulcrum-train" "${model[@]}" "$@" 2>&1)" ||
        { echo "$output" >&2; exit 1; }
    local lines
    lines="$(echo "$output" | grep '^memory by rank:')"
    [[ -n "$lines" ]] || { echo "$output" >&2; exit 1; }
    measured="$(echo "$lines" | sed 's/.*: peak \([0-9.]*\) MiB.*/\1/' | sort -g | tail -1)"
    pinned="$(echo "$lines" | sed 's/.*, \([0-9.]*\) MiB pinned;.*/\1/' | sort -g | tail -1)"
    predicted="$(echo "$lines" | sed 's/.*full micro-batches \([0-9.]*\) MiB.*/\1/' | sort -g |
        tail -1)"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
error() { awk -v p="$1" -v m="$2" 'BEGIN { printf "%+.1f%%", 100 * (p - m) / m }'; }
row() { printf '%-44s %5s %9s %10s %7s %9s %8s\n' "$@"; }

row layout ranks "max MiB" "predicted" error "vs base" pinned
emit() {  # NAME RANKS BASE_MEASURED
    row "$1" "$2" "$measured" "$predicted" "$(error "$predicted" "$measured")" \
        "$(ratio "$measured" "$3")" "$pinned"
}
# ZeRO over DP: the optimizer state, then the gradients (a block's buffer reduce-scattered
# after its backward), then the parameters, sharded.
measure 2 --dp 2
dp_base="$measured"
emit "dp2 (base)" 2 "$dp_base"
for zero in 1 2 3; do
    measure 2 --dp 2 --zero "$zero"
    emit "dp2 zero $zero" 2 "$dp_base"
done
# The same over four ranks, where a shard is a quarter.
measure 4 --dp 4
dp4_base="$measured"
emit "dp4 (base)" 4 "$dp4_base"
for zero in 1 2 3; do
    measure 4 --dp 4 --zero "$zero"
    emit "dp4 zero $zero" 4 "$dp4_base"
done
# A stage's own layers: pp2 and pp4 against one rank holding all 8.
measure 1
one_base="$measured"
emit "1 rank (base)" 1 "$one_base"
for pp in 2 4; do
    measure "$pp" --pp "$pp"
    emit "pp$pp 1f1b (each stage its own layers)" "$pp" "$one_base"
done
# Offloaded checkpoints against full recomputation alone.
measure 1 --recompute full
full_base="$measured"
emit "recompute full (base)" 1 "$full_base"
measure 1 --recompute full --offload-checkpoints
emit "recompute full + offloaded checkpoints" 1 "$full_base"
measure 2 --pp 2 --recompute full
pp_full="$measured"
emit "pp2 recompute full (base)" 2 "$pp_full"
measure 2 --pp 2 --recompute full --offload-checkpoints
emit "pp2 recompute full + offloaded checkpoints" 2 "$pp_full"
# Ulysses against all-gather CP.
measure 2 --cp 2
cp_base="$measured"
emit "cp2 all-gather (base)" 2 "$cp_base"
measure 2 --cp 2 --cp-impl ulysses
emit "cp2 ulysses" 2 "$cp_base"
measure 4 --cp 4 --cp-impl ulysses
emit "cp4 ulysses" 4 "$cp_base"
# FPDT's engine design on all-gather CP: chunks with Q/K/V offload, full recomputation with
# the checkpoints offloaded, ZeRO-2 over the CP ranks.
measure 2 --cp 2 --recompute full --offload-checkpoints --attention-chunk 128 --zero 2
emit "cp2 full + OC + chunks 128 + zero 2" 2 "$cp_base"
# The same over Ulysses' head shard, with ZeRO-2 and with ZeRO-3: FPDT's own design.
for zero in 2 3; do
    measure 2 --cp 2 --cp-impl ulysses --recompute full --offload-checkpoints \
        --attention-chunk 128 --zero "$zero"
    emit "cp2 ulysses full + OC + chunks 128 + zero $zero" 2 "$cp_base"
done
