#!/usr/bin/env bash
# The simulator's new schedules against the CPU engine (bench/README.md, "Simulated schedules
# against the engine"): for each layout, fulcrum-train runs 1F1B, interleaved 1F1B (v = 2) and
# ZB-H1 on the same model and documents under `fulcrum capture`; `fulcrum simulate` is
# calibrated on the 1F1B run only and plays the other schedules; the table gives the measured
# and the predicted step time (the median over steps after the first, which warms caches up)
# and the error. Ranks share the machine's cores: with more ranks than cores fulcrum-train naps
# while it waits and records the cores, and the simulator plays processor sharing
# (docs/simulate.md, "Ranks that share cores"). On a
# machine that others load too, each schedule is captured REPS times, round-robin, so that the
# schedules see the same load on average: "measured" is the median over every rep's steps,
# "simulated" the median over the reps of the prediction calibrated on that rep's 1F1B run;
# "spread" is the range of the reps' own medians, the noise to read the error against.
# Usage: bench/sim/cpu_schedules.sh [BUILD_DIR] [WORK_DIR] [LAYOUTS] [REPS]
#        (LAYOUTS: "pp2 pp4", REPS: 4)
set -euo pipefail
build=${1:-build}
work=${2:-$(mktemp -d /tmp/fulcrum-cpu-schedules.XXXXXX)}
layouts=${3:-"pp2 pp4"}
reps=${4:-4}
fulcrum=$build/app/fulcrum
train=$build/engine/fulcrum-train
source "$(dirname "${BASH_SOURCE[0]}")/../common/runs.sh"
# One BLAS thread a rank: ranks, not threads, share the cores.
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
mkdir -p "$work"
echo "runs in $work"

# Documents of varied length (next-fit fills micro-batches to between about half and all of
# the context), so that the fit can tell the per-pass, per-token and per-pair terms apart: with
# equal micro-batches they are collinear and a 1F1B fit cannot say what interleaving's extra
# passes or ZB-H1's split cost.
# Two layers a stage at least, so that pp8 can interleave two chunks (16 layers there).
common=(--hidden 96 --heads 4 --context 256 --micro-batches 8 --steps 5
        --lengths lognormal:median=120,sigma=0.9 --documents 4096)
layers_of() { echo $(($1 * 2 > 8 ? $1 * 2 : 8)); }
schedules=(1f1b interleaved zb-h1)
args_of() {  # SCHEDULE
    case $1 in
    interleaved) echo "--schedule interleaved --virtual-stages 2" ;;
    *) echo "--schedule $1" ;;
    esac
}
for layout in $layouts; do
    pp=${layout#pp}
    for rep in $(seq 1 "$reps"); do
        for schedule in "${schedules[@]}"; do
            # shellcheck disable=SC2046
            capture "$schedule-$layout-r$rep" "$pp" --pp "$pp" --layers "$(layers_of "$pp")" \
                $(args_of "$schedule") "${common[@]}"
        done
    done
    for rep in $(seq 1 "$reps"); do
        calibration="$work/1f1b-$layout-r$rep/run.fulcrum"
        for schedule in "${schedules[@]}"; do
            # shellcheck disable=SC2046
            "$fulcrum" simulate --calibrate "$calibration" $(args_of "$schedule") --json \
                > "$work/$schedule-$layout-r$rep.sim.json"
        done
    done
done

python3 - "$work" "$reps" $layouts <<'PY'
import json, statistics, sys
work, reps, layouts = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

def measured_steps(name):
    steps = {}
    for row in json.load(open(f"{work}/{name}.json"))["step_breakdown"]:
        steps[row["step"]] = max(steps.get(row["step"], 0), row["wall_ns"])
    return {s: v for s, v in steps.items() if s > 0}  # step 0 warms caches up

def predicted(name, shown):
    result = json.load(open(f"{work}/{name}.sim.json"))["results"][0]
    steps = [s["duration_ns"] for s in result["steps"] if s["step"] in shown]
    return statistics.median(steps), result["mean_bubble_fraction"]

def measured_bubble(name):
    b = json.load(open(f"{work}/{name}.json"))["bubbles"]
    later = [p for p in b["pipelines"] if p["step"] > 0]
    return sum(p["measured_fraction"] for p in later) / max(1, len(later))

print(f"{'layout':<7}{'schedule':<13}{'measured':>10}{'spread':>17}{'simulated':>11}{'error':>8}"
      f"{'bubble measured':>17}{'simulated':>11}")
for layout in layouts:
    for schedule in ["1f1b", "interleaved", "zb-h1"]:
        runs = [f"{schedule}-{layout}-r{r}" for r in range(1, reps + 1)]
        all_steps, medians, predictions, bubbles, simulated_bubbles = [], [], [], [], []
        for run in runs:
            steps = measured_steps(run)
            all_steps += steps.values()
            medians.append(statistics.median(steps.values()))
            p, b = predicted(run, steps)
            predictions.append(p)
            simulated_bubbles.append(b)
            bubbles.append(measured_bubble(run))
        m = statistics.median(all_steps)
        p = statistics.median(predictions)
        spread = f"{min(medians) / 1e6:.0f}-{max(medians) / 1e6:.0f}ms"
        note = "  (calibration runs)" if schedule == "1f1b" else ""
        print(f"{layout:<7}{schedule:<13}{m / 1e6:>8.0f}ms{spread:>17}{p / 1e6:>9.0f}ms"
              f"{100 * (p - m) / m:>+7.1f}%{statistics.median(bubbles):>17.3f}"
              f"{statistics.median(simulated_bubbles):>11.3f}{note}")
PY
