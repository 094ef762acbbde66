#!/usr/bin/env bash
# Device peak memory of FPDT-style chunked attention against the chunk size, with and without
# offload, and against whole-document attention in the same run (issue 23: "the device peak
# falls by what is offloaded, less two chunks' double buffers").
#
# One rank, long documents. "peak" is the backend's own count of its device allocations (on
# the CPU backend that is host memory standing in for the device), "pinned" its page-locked
# host memory. For each chunk size the table gives what went to pinned memory less the two
# chunk slots [chunk, 3C] ("pinned - slots") next to the fall it should equal (peak without
# offload minus peak with it, same chunk). On the CPU backend the copies are memcpys on
# threads, so the time column says what chunking and copying cost there, not what a GPU hides.
# Usage: bench/engine/offload_memory.sh [BUILD_DIR] [BACKEND] [CHUNKS...]
set -euo pipefail
build="${1:-build}"
backend="${2:-cpu}"
shift $(($# > 2 ? 2 : $#))
chunks=("$@")
[[ ${#chunks[@]} -gt 0 ]] || chunks=(1024 512 256 128)
steps=2
model=(--backend "$backend" --steps "$steps" --layers 8 --hidden 256 --heads 8 --context 2048
       --lengths long-tail:context=2048,median=1024 --documents 256 --micro-batches 2)
run() { "$build/engine/fulcrum-train" "${model[@]}" "$@" 2>&1; }
field() { sed -n "$1" | head -1; }
# Sets peak, pinned, buffers and per_step from one run's output.
measure() {
    local output seconds
    output="$(run "$@")"
    peak="$(echo "$output" | field 's/^memory on rank 0: peak \([0-9.]*\) MiB.*/\1/p')"
    pinned="$(echo "$output" | field 's/.*, \([0-9.]*\) MiB pinned host memory$/\1/p')"
    buffers="$(echo "$output" | field 's/.*: \([0-9.]*\) MiB of device double buffers.*/\1/p')"
    seconds="$(echo "$output" | field 's/^done: \([0-9]*\) steps, \([0-9.]*\) s.*/\2/p')"
    per_step="$(awk -v s="$seconds" -v n="$steps" 'BEGIN { printf "%.2f", s / n }')"
    [[ -n "$peak" && -n "$pinned" && -n "$seconds" ]] || { echo "$output" >&2; exit 1; }
}
ratio() { awk -v a="$1" -v b="$2" -v digits="${3:-3}" 'BEGIN { printf "%.*f", digits, a / b }'; }

printf '%-7s %-8s %10s %9s %11s %15s %10s %8s %9s\n' chunk offload "peak MiB" "vs whole" \
    "pinned MiB" "pinned - slots" "peak fall" "s/step" "vs whole"
measure
whole_peak="$peak" whole_step="$per_step"
printf '%-7s %-8s %10s %9s %11s %15s %10s %8s %9s\n' whole - "$peak" 1.000 "$pinned" - - \
    "$per_step" 1.00
for chunk in "${chunks[@]}"; do
    measure --attention-chunk "$chunk" --offload off
    resident_peak="$peak"
    printf '%-7s %-8s %10s %9s %11s %15s %10s %8s %9s\n' "$chunk" off "$peak" \
        "$(ratio "$peak" "$whole_peak")" "$pinned" - - "$per_step" \
        "$(ratio "$per_step" "$whole_step" 2)"
    measure --attention-chunk "$chunk" --offload on
    expected="$(awk -v p="$pinned" -v b="$buffers" 'BEGIN { printf "%.2f", p - b }')"
    fall="$(awk -v a="$resident_peak" -v b="$peak" 'BEGIN { printf "%.2f", a - b }')"
    printf '%-7s %-8s %10s %9s %11s %15s %10s %8s %9s\n' "$chunk" on "$peak" \
        "$(ratio "$peak" "$whole_peak")" "$pinned" "$expected" "$fall" "$per_step" \
        "$(ratio "$per_step" "$whole_step" 2)"
done
