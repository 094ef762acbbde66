#!/usr/bin/env bash
# Figures of issue 5 on real captured CPU runs of fulcrum-train (bench/README.md):
#   1. the measured pipeline bubble fraction of GPipe and 1F1B runs against (p−1)/m;
#   2. the simulator's predicted step time against the measured one, for each balancer:
#      calibrated on the run itself, and calibrated on the fixed run only (the real use:
#      "what would wlb do?" asked of a fixed run).
# Usage: bench/analysis/real_runs.sh [BUILD_DIR] [WORK_DIR]
set -euo pipefail
build=${1:-build}
work=${2:-$(mktemp -d /tmp/fulcrum-real-runs.XXXXXX)}
fulcrum=$build/app/fulcrum
train=$build/engine/fulcrum-train
source "$(dirname "${BASH_SOURCE[0]}")/../common/runs.sh"
mkdir -p "$work"
echo "runs in $work"

echo "== 1. pipeline bubbles against (p-1)/m"
common=(--context 256 --layers 4 --hidden 64 --steps 6 --micro-batches 8)
skewed=(--lengths long-tail:context=256,median=48)
capture gpipe-pp4 4 --pp 4 --schedule gpipe "${common[@]}" "${skewed[@]}"
capture 1f1b-pp4 4 --pp 4 --schedule 1f1b "${common[@]}" "${skewed[@]}"
capture gpipe-pp2 2 --pp 2 --schedule gpipe "${common[@]}" "${skewed[@]}"
# Equal micro-batches (one 256-token document each): only the schedule's bubble remains.
capture gpipe-pp4-equal 4 --pp 4 --schedule gpipe "${common[@]}" \
    --lengths lognormal:median=4096,sigma=0.01
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
print(f"{'run':<16}{'theory':>9}{'measured':>10}{'replay':>9}{'measured/theory':>17}"
      f"{'unequal mbs':>13}")
for name in ["gpipe-pp4", "1f1b-pp4", "gpipe-pp2", "gpipe-pp4-equal"]:
    b = json.load(open(f"{work}/{name}.json"))["bubbles"]
    later = [p for p in b["pipelines"] if p["step"] > 0]  # step 0 warms caches up
    measured = sum(p["measured_fraction"] for p in later) / len(later)
    replay = sum(p["replay_fraction"] for p in later) / len(later)
    stages = [s for s in b["stages"] if s["step"] > 0]
    unequal = sum(s["unequal_microbatch_ns"] for s in stages) / max(1, sum(s["bubble_ns"] for s in stages))
    print(f"{name:<16}{b['theory_fraction']:>9.3f}{measured:>10.3f}{replay:>9.3f}"
          f"{measured / b['theory_fraction']:>16.2f}x{100 * unequal:>12.0f}%")
PY

echo "== 2. simulator against measured step time, per balancer"
lengths=long-tail:context=512,median=64
for balancer in fixed ilp wlb; do
    capture "$balancer" 2 --pp 2 --balancer "$balancer" --micro-batches 8 --context 512 \
        --lengths "$lengths" --layers 4 --hidden 64 --steps 8
    "$fulcrum" simulate --calibrate "$work/$balancer/run.fulcrum" --json > "$work/$balancer-self.sim.json"
    "$fulcrum" simulate --calibrate "$work/fixed/run.fulcrum" --balancer "$balancer" --json \
        > "$work/$balancer-from-fixed.sim.json"
done
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]

def measured_steps(name):
    steps = {}
    for row in json.load(open(f"{work}/{name}.json"))["step_breakdown"]:
        steps[row["step"]] = max(steps.get(row["step"], 0), row["wall_ns"])
    return steps

def predicted_steps(path):
    result = json.load(open(path))["results"][0]
    return {s["step"]: s["duration_ns"] for s in result["steps"]}

print(f"{'balancer':<9}{'measured':>11}{'self-calibrated':>17}{'error':>8}"
      f"{'from fixed':>12}{'error':>8}")
for balancer in ["fixed", "ilp", "wlb"]:
    measured = measured_steps(balancer)
    shown = sorted(s for s in measured if s > 0)  # step 0 warms caches up
    m = sum(measured[s] for s in shown) / len(shown)
    row = f"{balancer:<9}{m / 1e6:>9.1f}ms"
    for kind in ["self", "from-fixed"]:
        predicted = predicted_steps(f"{work}/{balancer}-{kind}.sim.json")
        p = sum(predicted[s] for s in shown) / len(shown)
        row += f"{p / 1e6:>{15 if kind == 'self' else 10}.1f}ms{100 * (p - m) / m:>+7.1f}%"
    print(row)
PY
