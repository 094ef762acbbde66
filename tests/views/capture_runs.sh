#!/usr/bin/env bash
# CTest fixture for the GUI suites: two real 4-rank captures of fulcrum-train (pp2 × cp2,
# 1F1B, long-tailed lengths) that differ only in the balancer, at OUT/{fixed,wlb}/run.fulcrum.
# Usage: capture_runs.sh BUILD_DIR OUT_DIR
set -euo pipefail
build="$1"
out="$2"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
rm -rf "$out"
mkdir -p "$out"
for balancer in fixed wlb; do
    "$build/app/fulcrum" capture -o "$out/$balancer" -- \
        mpirun -np 4 "$build/engine/fulcrum-train" --pp 2 --cp 2 --schedule 1f1b \
        --cp-shard per-doc --lengths long-tail:context=512,median=96 --context 512 \
        --micro-batches 4 --layers 2 --hidden 32 --heads 2 --steps 3 --balancer "$balancer"
done
test -s "$out/fixed/run.fulcrum" && test -s "$out/wlb/run.fulcrum"
