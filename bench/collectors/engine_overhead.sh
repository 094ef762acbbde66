#!/usr/bin/env bash
# CPU engine step time under `fulcrum capture` against the same run without it (issue 4,
# target ≤ 3% slower). Alternates the two, REPEATS times each, and prints the ratio of each
# pair and their median: pairs run back to back see the same machine load.
# Usage: bench/collectors/engine_overhead.sh [BUILD_DIR] [REPEATS]
set -euo pipefail
build="${1:-build}"
repeats="${2:-3}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
train=(mpirun -np 2 "$build/engine/fulcrum-train" --pp 2 --lengths long-tail:context=1024,median=128
       --context 1024 --micro-batches 4 --layers 4 --hidden 128 --steps 15)
seconds() { grep '^done' | sed 's/.*steps, \([0-9.]*\) s.*/\1/'; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
printf '%-6s %12s %12s %8s\n' pair "plain (s)" "capture (s)" ratio
ratios=()
for i in $(seq "$repeats"); do
    plain=$("${train[@]}" 2>&1 | seconds)
    captured=$("$build/app/fulcrum" capture -o "$work/$i" -- "${train[@]}" 2>&1 | seconds)
    ratio=$(python3 -c "print(f'{$captured / $plain:.3f}')")
    ratios+=("$ratio")
    printf '%-6s %12s %12s %8s\n' "$i" "$plain" "$captured" "$ratio"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -n | sed -n "$(( (repeats + 1) / 2 ))p")
printf 'median ratio %s (target <= 1.03)\n' "$median"
