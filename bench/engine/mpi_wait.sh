#!/usr/bin/env bash
# Napping against spinning while ranks wait (bench/README.md, "Ranks that share cores"): with
# more ranks than cores, fulcrum-train --mpi-wait nap sleeps between tests of a pending
# receive (and meets at a napping barrier before a collective) instead of letting Open MPI
# poll on a core a computing rank needs. Each layout runs with --mpi-wait spin and nap, REPS
# times alternately so that both see the same machine load on average; the table gives the
# median step time over the steps after the first (which warms caches up) and nap / spin.
# Usage: bench/engine/mpi_wait.sh [BUILD_DIR] [REPS] [LAYOUTS]
#        (LAYOUTS: "pp4 dp2,pp2 tp4 cp4 pp8", REPS: 3; ~2 min on 2 cores)
set -euo pipefail
build=${1:-build}
reps=${2:-3}
layouts=${3:-"pp4 dp2,pp2 tp4 cp4 pp8"}
train=$build/engine/fulcrum-train
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
work=$(mktemp -d /tmp/fulcrum-mpi-wait.XXXXXX)
trap 'rm -rf "$work"' EXIT
echo "cores: $(getconf _NPROCESSORS_ONLN); load average: $(cut -d' ' -f1-3 /proc/loadavg)"

common=(--layers 16 --hidden 96 --heads 4 --context 256 --micro-batches 8 --steps 6
        --lengths lognormal:median=120,sigma=0.9 --documents 4096)
for layout in $layouts; do
    args=() ranks=1
    for part in ${layout//,/ }; do
        degree=${part:2}
        args+=("--${part:0:2}" "$degree")
        ranks=$((ranks * degree))
    done
    for rep in $(seq 1 "$reps"); do
        for wait in spin nap; do
            mpirun -np "$ranks" "$train" "${args[@]}" "${common[@]}" --mpi-wait "$wait" \
                > "$work/$layout-$wait-$rep.log" 2>&1 || { cat "$work/$layout-$wait-$rep.log"; exit 1; }
        done
    done
done

python3 - "$work" "$reps" $layouts <<'PY'
import re, statistics, sys
work, reps, layouts = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

def steps(layout, wait):
    times = []
    for rep in range(1, reps + 1):
        for line in open(f"{work}/{layout}-{wait}-{rep}.log"):
            m = re.match(r"step\s+(\d+) .*\|\s+([\d.]+) ms \|", line)
            if m and int(m.group(1)) > 0:
                times.append(float(m.group(2)))
    return statistics.median(times)

print(f"{'layout':<10}{'ranks':>6}{'spin ms/step':>14}{'nap ms/step':>13}{'nap / spin':>12}")
for layout in layouts:
    ranks = 1
    for part in layout.split(","):
        ranks *= int(part[2:])
    spin, nap = steps(layout, "spin"), steps(layout, "nap")
    print(f"{layout:<10}{ranks:>6}{spin:>14.1f}{nap:>13.1f}{nap / spin:>12.3f}")
PY
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
