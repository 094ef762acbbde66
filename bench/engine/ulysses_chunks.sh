#!/usr/bin/env bash
# FPDT's pipeline under Ulysses in fulcrum-train (docs/engine.md, "CP's two implementations"):
# the step time of cp2 Ulysses with chunked, offloaded attention, full recomputation and
# offloaded checkpoints (FPDT's design) on FPDT's input order (--cp-shard chunked), against
# the same on per-doc shards (where each chunk comes from one rank, whose projection the other
# waits for), Ulysses with whole attention and all-gather CP with the same chunks, in the same
# run; and, given BASE_BUILD, the two FPDT
# layouts and the all-gather one from another build (an earlier commit), to see what a change
# costs against what the machine's drift alone does. The layouts run
# REPS times alternately, so that each sees the same machine load on average; the table gives
# the median step time over the steps after the first, the peak of the largest rank and the
# ratio to the first row.
# Usage: bench/engine/ulysses_chunks.sh [BUILD_DIR] [REPS] [BASE_BUILD]   (~1.5 min on 2 cores,
#        REPS 3, without BASE_BUILD)
# CONTEXT (1024), CHUNK (128) and STEPS (4) in the environment set the documents' length, the
# attention chunk and the steps a run; with STEPS 1 the one step is timed.
set -euo pipefail
build=${1:-build}
reps=${2:-3}
base=${3:-}
source "$(dirname "${BASH_SOURCE[0]}")/../common/runs.sh"  # Open MPI's settings
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
work=$(mktemp -d /tmp/fulcrum-ulysses-chunks.XXXXXX)
trap 'rm -rf "$work"' EXIT
echo "cores: $(getconf _NPROCESSORS_ONLN); load average: $(cut -d' ' -f1-3 /proc/loadavg)"

context=${CONTEXT:-1024}
chunk=${CHUNK:-128}
steps=${STEPS:-4}
for _ in $(seq $((4 * steps))); do echo "$context"; done > "$work/lengths.txt"
common=(--steps "$steps" --layers 4 --hidden 128 --heads 8 --context "$context"
        --lengths "file:$work/lengths.txt" --balancer fixed --micro-batches 2 --cp 2)
fpdt=(--cp-impl ulysses --attention-chunk "$chunk" --recompute full --offload-checkpoints)
names=("ulysses chunks $chunk offload, chunked shards" "ulysses chunks $chunk offload, per-doc shards"
       "ulysses whole attention" "all-gather chunks $chunk offload")
binaries=("$build" "$build" "$build" "$build")
options=("${fpdt[*]} --cp-shard chunked" "${fpdt[*]} --cp-shard per-doc"
         "--cp-impl ulysses --recompute full --offload-checkpoints"
         "--cp-impl all-gather --attention-chunk $chunk --recompute full --offload-checkpoints")
if [ -n "$base" ]; then  # the all-gather row, unchanged by the engine's Ulysses, as a control
    names+=("ulysses chunks $chunk, chunked, $base" "ulysses chunks $chunk, per-doc, $base"
            "all-gather chunks $chunk, $base")
    binaries+=("$base" "$base" "$base")
    options+=("${options[0]}" "${options[1]}" "${options[3]}")
fi

for rep in $(seq 1 "$reps"); do
    for i in "${!names[@]}"; do
        # shellcheck disable=SC2086  # the options are words
        mpirun -np 2 "${binaries[$i]}/engine/fulcrum-train" "${common[@]}" ${options[$i]} \
            > "$work/$i-$rep.log" 2>&1 || { cat "$work/$i-$rep.log"; exit 1; }
    done
done

python3 - "$work" "$reps" "$steps" "${names[@]}" <<'PY'
import re, statistics, sys
work, reps, steps, names = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]

def figures(i):
    times, peak = [], 0.0
    for rep in range(1, reps + 1):
        for line in open(f"{work}/{i}-{rep}.log"):
            m = re.match(r"step\s+(\d+) .*\|\s+([\d.]+) ms \|", line)
            if m and (int(m.group(1)) > 0 or steps == 1):
                times.append(float(m.group(2)))
            m = re.match(r"memory by rank: .*: peak ([\d.]+) MiB", line)
            if m:
                peak = max(peak, float(m.group(1)))
    return statistics.median(times), peak

rows = [figures(i) for i in range(len(names))]
print(f"{'layout':<52}{'ms/step':>9}{'peak MiB':>10}{'time ratio':>12}")
for name, (ms, peak) in zip(names, rows):
    print(f"{name:<52}{ms:>9.1f}{peak:>10.3f}{ms / rows[0][0]:>12.3f}")
PY
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
