#!/usr/bin/env bash
# ZeRO's traffic in the simulator against the CPU engine (issue 38; bench/README.md, "ZeRO-2
# and -3 scatter after every backward, in the simulator too"): fulcrum-train runs data
# parallelism over two ranks with ZeRO 0, 1, 2 and 3 on the same model, documents and four
# micro-batches under `fulcrum capture`; `fulcrum simulate --calibrate` replays each run with
# its own layout. The table gives the measured step time (the median over steps after the
# first, which warms caches up), the predicted one (the median of the same steps) and the
# error; with OTHER_FULCRUM, another build's simulator replays the same runs beside it (the
# baseline: a build before a change of the pricing). Each layout is captured REPS times,
# round-robin, so that they see the same load on average; "spread" is the range of the reps'
# own measured medians, the noise to read the errors against. The second table is each ZeRO
# stage's step against ZeRO-1's, measured and predicted: what the stage costs, which the
# machine's load shifts far less than the step times themselves.
# Usage: bench/sim/zero_replay.sh [BUILD_DIR] [REPS] [OTHER_FULCRUM]   (~1 min a rep on 2 cores)
set -euo pipefail
build=${1:-build}
reps=${2:-2}
other=${3:-}
fulcrum=$build/app/fulcrum
train=$build/engine/fulcrum-train
work=$(mktemp -d /tmp/fulcrum-zero-replay.XXXXXX)
trap 'rm -rf "$work"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/../common/runs.sh"
# One BLAS thread a rank: ranks, not threads, share the cores.
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

common=(--dp 2 --micro-batches 4 --layers 4 --hidden 256 --heads 4 --context 512 --steps 6
        --lengths lognormal:median=200,sigma=0.9)
stages=(0 1 2 3)
for rep in $(seq 1 "$reps"); do
    for zero in "${stages[@]}"; do
        capture "zero$zero-r$rep" 2 --zero "$zero" "${common[@]}"
        "$fulcrum" simulate --calibrate "$work/zero$zero-r$rep/run.fulcrum" --steps 6 --json \
            > "$work/zero$zero-r$rep.sim.json"
        if [ -n "$other" ]; then
            "$other" simulate --calibrate "$work/zero$zero-r$rep/run.fulcrum" --steps 6 --json \
                > "$work/zero$zero-r$rep.other.json"
        fi
    done
done

python3 - "$work" "$reps" "$other" "${stages[@]}" <<'PY'
import json, os, statistics, sys
work, reps, other, stages = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]

def measured_steps(name):
    steps = {}
    for row in json.load(open(f"{work}/{name}.json"))["step_breakdown"]:
        if row["step"] is not None:
            steps[row["step"]] = max(steps.get(row["step"], 0), row["wall_ns"])
    return {s: v for s, v in steps.items() if s > 0}  # step 0 warms caches up

def predicted(path, shown):
    result = json.load(open(path))["results"][0]
    return statistics.median(s["duration_ns"] for s in result["steps"] if s["step"] in shown)

def error(p, m):
    return f"{100 * (p - m) / m:+.1f}%"

header = f"{'layout':<14} {'measured':>9} {'spread':>15} {'simulated':>10} {'error':>7}"
if other:
    header += f" {'baseline':>9} {'error':>7}"
print(header)
errors, baseline_errors = [], []
by_stage = {}  # layout -> (measured, simulated, baseline)
for zero in stages:
    measured, ours, theirs, medians = [], [], [], []
    for rep in range(1, reps + 1):
        name = f"zero{zero}-r{rep}"
        steps = measured_steps(name)
        measured += steps.values()
        medians.append(statistics.median(steps.values()))
        ours.append(predicted(f"{work}/{name}.sim.json", steps))
        if other:
            theirs.append(predicted(f"{work}/{name}.other.json", steps))
    m = statistics.median(measured)
    p = statistics.median(ours)
    by_stage[zero] = (m, p, statistics.median(theirs) if other else None)
    errors.append(abs(p - m) / m)
    line = (f"{'dp2 zero ' + zero:<14} {m / 1e9:8.3f}s {min(medians) / 1e9:6.3f}-"
            f"{max(medians) / 1e9:.3f} s {p / 1e9:9.3f}s {error(p, m):>7}")
    if other:
        b = statistics.median(theirs)
        baseline_errors.append(abs(b - m) / m)
        line += f" {b / 1e9:8.3f}s {error(b, m):>7}"
    print(line)
summary = f"mean |error|: {100 * statistics.mean(errors):.1f}%"
if other:
    summary += f" (baseline {os.path.basename(other)}: {100 * statistics.mean(baseline_errors):.1f}%)"
print(summary)
print()
header = f"{'vs zero 1':<14} {'measured':>9} {'simulated':>10}"
if other:
    header += f" {'baseline':>9}"
print(header)
base = by_stage["1"]
for zero in stages:
    values = by_stage[zero]
    line = f"{'dp2 zero ' + zero:<14} {values[0] / base[0]:9.3f} {values[1] / base[1]:10.3f}"
    if other:
        line += f" {values[2] / base[2]:9.3f}"
    print(line)
PY
