# Sourced by the benchmark scripts that capture fulcrum-train runs: Open MPI as root with more
# ranks than cores, waiting ranks yielding (docs/sources.md, "Launchers"), and
#   capture NAME RANKS ARGS...
# which captures `mpirun -np RANKS fulcrum-train ARGS...` into $work/NAME (once: a run already
# there is kept) and writes `fulcrum analyze --json` of it to $work/NAME.json. The caller sets
# $fulcrum, $train and $work.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1

capture() {  # NAME RANKS ARGS...
    local name=$1 ranks=$2
    shift 2
    if [ ! -f "$work/$name/run.fulcrum" ]; then
        "$fulcrum" capture -o "$work/$name" --force -- mpirun -np "$ranks" "$train" "$@" \
            > "$work/$name.log" 2>&1 || { cat "$work/$name.log"; exit 1; }
    fi
    "$fulcrum" analyze --json "$work/$name/run.fulcrum" > "$work/$name.json"
}
