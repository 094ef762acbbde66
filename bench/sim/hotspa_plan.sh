#!/usr/bin/env bash
# `fulcrum plan --hot-switch auto` on HotSPa's case study (bench/README.md, "Choosing the
# hot-switch spec: fulcrum plan --hot-switch auto"): the 32B model of hotspa_case.sh on 32 A100s
# (8 a node, TP up to 16 as HotSPa's static (1, 16, 2)), a 32K context, 32 sequences a step and
# its CommonCrawl stand-in lengths. Prints the plan's best static layout and the chosen spec with
# the predicted speedup, then plays the chosen spec and HotSPa's C1 against HotSPa's static
# layout with hotspa_case.sh's settings (one epoch, 1F1B, fixed packing), whose published ratio
# is 1.96x, but on the a100 preset with each document attending to itself alone: the plan
# prices fulcrum-train's attention, where hotspa_case.sh plays HotSPa's one mask across each
# packed sequence on the A800's NVLink.
# Usage: bench/sim/hotspa_plan.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
fulcrum=$build/app/fulcrum
lengths=long-tail:context=32768,median=100,sigma=1.3,tail=0.002
model=(--layers 60 --hidden 6656 --heads 64 --vocab 32000 --context 32768 --hardware a100)

start=$(date +%s.%N)
plan=$("$fulcrum" plan "${model[@]}" --world 32 --max-tp 16 --global-batch 32 --lengths "$lengths" \
    --documents 16000 --steps 4 --top 1 --hot-switch auto --json)
seconds=$(echo "$(date +%s.%N) - $start" | bc)
python3 - "$plan" "$seconds" <<'PY'
import json, sys
plan = json.loads(sys.argv[1])
hot = plan["hot_switch"][0]
print("plan --hot-switch auto: %.1f s, %d specs estimated, %d played" % (
    float(sys.argv[2]), hot["specs_estimated"], len(hot["played"])))
print("  best static  %-28s %10.0f tok/s" % (hot["static"]["layout"], hot["static"]["tokens_per_s"]))
print("  chosen       %-28s %10.0f tok/s  %.2fx  (recompute %s, sequence parallel %s, switching %.1f%%)" % (
    hot["spec"], hot["tokens_per_s"], hot["speedup"], hot["recompute"], hot["sequence_parallel"],
    100 * hot["switching_share"]))
PY
chosen=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["hot_switch"][0]["spec"])' "$plan")

common=("${model[@]}" --dp 1 --tp 16 --pp 2 --micro-batches 32 --dtype bf16 --lengths "$lengths"
        --documents 16000 --epochs 1 --json)
echo
printf '%-9s %12s %12s %7s  %s\n' spec "static tok/s" "hot tok/s" ratio layouts
for name in chosen C1; do
    spec=$chosen
    [[ $name == C1 ]] && spec="0-4096:dp4,tp2,pp4;4096-16384:dp2,tp8,pp2;16384-:tp16,pp2"
    "$fulcrum" simulate "${common[@]}" --hot-switch "$spec" | python3 -c '
import json, sys
results = json.load(sys.stdin)["results"]
static, hot = results[0], results[1]
print("%-9s %12.0f %12.0f %6.2fx  %s" % (sys.argv[1], static["tokens_per_s"], hot["tokens_per_s"],
      hot["tokens_per_s"] / static["tokens_per_s"], sys.argv[2]))
' "$name" "$spec"
done
