#!/usr/bin/env bash
# HotSPa's hot switching on the CPU engine (issue 17, bench/README.md, "Hot switching in the
# engine"): fulcrum-train on long-tailed lengths under every static layout of 2 ranks (dp2,
# cp2, tp2, pp2) and under hot-switched specs (short documents under dp2, long ones under cp2
# or tp2), each captured REPS times round-robin so that all see the same machine load on
# average. "measured" is tokens/s over the steps after the first (which warms caches up),
# the median over the reps; "vs best" is against the best static layout of the same run.
# Then `fulcrum simulate --calibrate` on each rep's dp2 run (the specs' home layout) with
# --hot-switch plays both the static dp2 layout and the hot-switched run: "simulated" is the
# median of those predictions, "error" against the measured figure; "+bucket run" calibrates
# on the dp2 run and the long bucket's static run of the same rep (cp2 or tp2), whose costs the
# simulator merges for that bucket's layout (docs/simulate.md, "Hot switching"). A hot-switched run cannot
# calibrate the simulator itself (it writes no workload table: its micro-batches run under
# several layouts in one step), so both predictions come from the static run.
# Usage: bench/engine/hot_switch.sh [BUILD_DIR] [WORK_DIR] [REPS]   (~4 min on 2 cores)
set -euo pipefail
build=${1:-build}
work=${2:-$(mktemp -d /tmp/fulcrum-hot-switch.XXXXXX)}
reps=${3:-2}
fulcrum=$build/app/fulcrum
train=$build/engine/fulcrum-train
source "$(dirname "${BASH_SOURCE[0]}")/../common/runs.sh"
# One BLAS thread a rank: ranks, not threads, share the cores.
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
mkdir -p "$work"
echo "runs in $work"

steps=5
common=(--layers 4 --hidden 64 --heads 4 --context 1024 --micro-batches 4 --steps "$steps"
        --lengths long-tail:context=1024,median=64 --documents 2048 --balancer fixed)
statics=(dp2 cp2 tp2 pp2)
specs=("0-256:dp2;256-:cp2" "0-256:dp2;256-:tp2")
for rep in $(seq 1 "$reps"); do
    for layout in "${statics[@]}"; do
        capture "$layout-r$rep" 2 "--${layout:0:2}" "${layout:2}" "${common[@]}"
    done
    for i in "${!specs[@]}"; do
        capture "hot$i-r$rep" 2 --hot-switch "${specs[$i]}" "${common[@]}"
    done
done
for rep in $(seq 1 "$reps"); do
    for i in "${!specs[@]}"; do
        "$fulcrum" simulate --calibrate "$work/dp2-r$rep/run.fulcrum" --hot-switch "${specs[$i]}" \
            --steps "$steps" --json > "$work/hot$i-r$rep.sim.json"
        long=${specs[$i]##*:}
        "$fulcrum" simulate --calibrate "$work/dp2-r$rep/run.fulcrum" \
            --calibrate "$work/$long-r$rep/run.fulcrum" --hot-switch "${specs[$i]}" \
            --steps "$steps" --json > "$work/hot$i-r$rep.sim2.json"
    done
done

python3 - "$work" "$reps" "${specs[@]}" <<'PY'
import json, re, statistics, sys
work, reps, specs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
step_line = re.compile(r"^step +(\d+) .*\| (\d+) tokens \| ([0-9.]+) ms")

def measured(name):  # tokens/s over the steps after the first, from rank 0's lines
    tokens = seconds = 0
    for line in open(f"{work}/{name}.log"):
        m = step_line.match(line)
        if m and int(m.group(1)) > 0:
            tokens += int(m.group(2))
            seconds += float(m.group(3)) / 1e3
    return tokens / seconds

def simulated(name, which, suffix="sim"):  # the same figure from a simulation's steps
    steps = json.load(open(f"{work}/{name}.{suffix}.json"))["results"][which]["steps"]
    later = [s for s in steps if s["step"] > 0]
    return sum(s["tokens"] for s in later) / (sum(s["duration_ns"] for s in later) / 1e9)

def traffic(name):  # bytes sent by every rank over the run
    return sum(int(m.group(1)) for m in re.finditer(r"rank \d+ sent (\d+)", open(f"{work}/{name}.log").read()))

rows = {}
for layout in ["dp2", "cp2", "tp2", "pp2"]:
    rows[layout] = statistics.median(measured(f"{layout}-r{r}") for r in range(1, reps + 1))
best = max(rows, key=rows.get)
sim_dp2 = statistics.median(simulated(f"hot0-r{r}", 0) for r in range(1, reps + 1))
print(f"{'layout':<22}{'measured tok/s':>15}{'vs best':>9}{'simulated':>11}{'error':>8}"
      f"{'+bucket run':>12}{'error':>8}{'switch MiB':>12}")
for layout, value in rows.items():
    sim = f"{sim_dp2:>11.0f}{100 * (sim_dp2 - value) / value:>+7.1f}%" if layout == "dp2" else f"{'':>19}"
    print(f"static {layout:<15}{value:>15.0f}{value / rows[best]:>8.2f}x{sim}{'':>32}")
for i, spec in enumerate(specs):
    names = [f"hot{i}-r{r}" for r in range(1, reps + 1)]
    value = statistics.median(measured(n) for n in names)
    sim = statistics.median(simulated(n, 1) for n in names)
    sim2 = statistics.median(simulated(n, 1, "sim2") for n in names)
    moved = statistics.median(traffic(n) for n in names) / 2**20
    print(f"hot {spec:<18}{value:>15.0f}{value / rows[best]:>8.2f}x{sim:>11.0f}"
          f"{100 * (sim - value) / value:>+7.1f}%{sim2:>12.0f}{100 * (sim2 - value) / value:>+7.1f}%"
          f"{moved:>12.2f}")
print(f"best static: {best}; simulated hot / static dp2: " + ", ".join(
    f"{statistics.median(simulated(f'hot{i}-r{r}', 1) / simulated(f'hot{i}-r{r}', 0) for r in range(1, reps + 1)):.2f}x"
    for i in range(len(specs))) + "; measured hot / dp2: " + ", ".join(
    f"{statistics.median(measured(f'hot{i}-r{r}') for r in range(1, reps + 1)) / rows['dp2']:.2f}x"
    for i in range(len(specs))))
PY
