#!/usr/bin/env bash
# Peak memory and step time of FPDT-style chunked attention with and without offload, against
# whole-document attention in the same run (issue 8: "peak memory with and without offload
# reported"). One rank; long documents so that chunking applies. On the CPU backend the
# "device" peak is the backend's own allocations and the copies are memcpys, so the time
# column says what the extra copies cost there, not what a GPU would hide.
# Usage: bench/engine/offload_memory.sh [BUILD_DIR] [BACKEND]
set -euo pipefail
build="${1:-build}"
backend="${2:-cpu}"
model=(--backend "$backend" --steps 4 --layers 8 --hidden 256 --heads 8 --context 2048
       --lengths long-tail:context=2048,median=1024 --documents 256 --micro-batches 2)
run() { "$build/engine/fulcrum-train" "${model[@]}" "$@" 2>&1; }
field() { sed -n "$1" | head -1; }
printf '%-28s %12s %12s %10s %10s\n' configuration "peak MiB" "pinned MiB" "s/step" "vs whole"
base=""
for config in "whole" "chunk 512, offload off" "chunk 512, offload on" "chunk 256, offload on"; do
    case "$config" in
        whole) args=() ;;
        "chunk 512, offload off") args=(--attention-chunk 512 --offload off) ;;
        "chunk 512, offload on") args=(--attention-chunk 512 --offload on) ;;
        "chunk 256, offload on") args=(--attention-chunk 256 --offload on) ;;
    esac
    output="$(run "${args[@]}")"
    peak="$(echo "$output" | field 's/^memory on rank 0: peak \([0-9.]*\) MiB.*/\1/p')"
    pinned="$(echo "$output" | field 's/.*, \([0-9.]*\) MiB pinned host memory$/\1/p')"
    seconds="$(echo "$output" | field 's/^done: \([0-9]*\) steps, \([0-9.]*\) s.*/\2/p')"
    per_step="$(awk -v s="$seconds" 'BEGIN { printf "%.3f", s / 4 }')"
    [[ -n "$base" ]] || base="$per_step"
    ratio="$(awk -v a="$per_step" -v b="$base" 'BEGIN { printf "%.2f", a / b }')"
    printf '%-28s %12s %12s %10s %10s\n' "$config" "$peak" "$pinned" "$per_step" "$ratio"
done
