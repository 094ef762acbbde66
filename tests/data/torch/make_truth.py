"""Folds the per-rank coords that pp_jobs.py wrote into truth.json.

    python make_truth.py RAW_DIR TRUTH_JSON JOB...

RAW_DIR holds <job>-rank<R>.coords.json for each job; jobs already in TRUTH_JSON and not
named here are kept as they are. Everything in truth.json is what the script ran (its
configuration and torch.distributed's own answers), not something read back from a trace.
"""

import glob
import json
import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ beside the fixtures
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pp_jobs  # noqa: E402

PG_MEANING = {
    "default_pg": "world: all ranks",
    "mesh_pp": "pp: the pipeline stages of one dp replica; activations and gradients go "
    "between adjacent stages by send/recv",
    "mesh_dp": "dp: the replicas of the same model part; {dp_sync}",
    "mesh_tp": "tp: the tensor-parallel shards of one layer; all-reduce of the "
    "RowwiseParallel output in forward and of the ColwiseParallel input gradient in backward",
}

DP_SYNC = {
    "DDP": "DDP all-reduce of the gradients (one bucket per stage) after the last micro-batch's backward",
    "FSDP2": "FSDP2 all-gather of the parameters before forward and backward, reduce-scatter of "
    "the gradients after backward",
}

PP_LABELS = {
    "ScheduleGPipe": "user_annotation ranges 'Forward {mb}' and 'Backward {mb}' (no stage "
    "index: one stage per rank)",
    "Schedule1F1B": None,
    "ScheduleInterleaved1F1B": "user_annotation ranges 'PP:{action}', e.g. 'PP:2F0', 'PP:0B3', "
    "'PP:2SEND_F1', 'PP:0RECV_B0', 'PP:2WAIT_SEND_F0', 'PP:0UNSHARD', 'PP:0REDUCE_GRAD'",
    "ScheduleZBVZeroBubble": "user_annotation ranges 'PP:{action}', with the backward split "
    "into 'PP:{stage}I{mb}' (input gradient) and 'PP:{stage}W{mb}' (weight gradient)",
}


def rank_of(path):
    return int(re.search(r"-rank(\d+)\.coords\.json$", path).group(1))


def job_truth(job, raw):
    cfg = pp_jobs.JOBS[job]
    paths = sorted(glob.glob(os.path.join(raw, f"{job}-rank*.coords.json")), key=rank_of)
    per_rank = [json.load(open(p)) for p in paths]
    world = len(per_rank)
    assert world == cfg["pp"] * cfg["dp"] * cfg["tp"], (job, world)
    dp_wrapper = None
    if cfg["dp"] > 1:
        dp_wrapper = "FSDP2" if job == "tp2-dp2" else "DDP"

    groups = {}
    for c in per_rank:
        for g in c["pg_config"]:
            groups[g["pg_name"]] = g
    process_groups = []
    for name in sorted(groups, key=int):
        g = groups[name]
        meaning = PG_MEANING.get(g["pg_desc"], "?").format(dp_sync=DP_SYNC.get(dp_wrapper, ""))
        if g["pg_desc"] == "default_pg" and cfg["pp"] == world:
            meaning += "; also the pipeline group (stages send/recv over it)"
        process_groups.append(
            {
                "pg_name": g["pg_name"],
                "pg_desc": g["pg_desc"],
                "ranks": g["ranks"],
                "backend_config": g["backend_config"],
                "meaning": meaning,
            }
        )

    ranks = []
    for c in per_rank:
        r = {k: c[k] for k in ("rank", "pp_index", "dp_index", "tp_index", "stages")}
        r["model_chunks"] = len(c["stages"])
        for k in ("blocks", "actions", "compute_order"):
            if k in c:
                r[k] = c[k]
        r["groups"] = c["groups"]
        ranks.append(r)

    is_pp = cfg["schedule"] is not None
    t = {
        "files": [f"{job}-rank{r}.json.gz" for r in range(world)],
        "ranks": world,
        "degrees": {"pp": cfg["pp"], "dp": cfg["dp"], "tp": cfg["tp"]},
        "mesh_dim_names": (["pp", "dp"] if is_pp else ["dp", "tp"]) if world > cfg["pp"] else None,
        "schedule": cfg["schedule"],
        "stages_total": cfg["pp"] * cfg["chunks"] if is_pp else None,
        "model_chunks_per_rank": cfg["chunks"] if is_pp else None,
        "stage_placement": {"loop": "rank r holds stages r, r + pp, ...",
                            "v": "rank r holds stages r and 2*pp-1-r (V shape)"}.get(cfg["placement"]),
        "microbatches_per_step": cfg["mbs"] if is_pp else None,
        "microbatch_shape": [pp_jobs.MB_BATCH, pp_jobs.SEQ, pp_jobs.HIDDEN],
        "p2p_message": {"dtype": "float32", "shape": [pp_jobs.MB_BATCH, pp_jobs.SEQ, pp_jobs.HIDDEN]}
        if is_pp else None,
        "model": (f"{pp_jobs.N_BLOCKS} x (Linear({pp_jobs.HIDDEN},{pp_jobs.HIDDEN}) + ReLU), "
                  f"{pp_jobs.N_BLOCKS // (cfg['pp'] * cfg['chunks'])} blocks per stage") if is_pp
        else f"2 x residual MLP (Linear({pp_jobs.HIDDEN},{4 * pp_jobs.HIDDEN}) colwise, ReLU, "
        f"Linear({4 * pp_jobs.HIDDEN},{pp_jobs.HIDDEN}) rowwise)",
        "dp_wrapper": dp_wrapper,
        "tp_style": "parallelize_module: up=ColwiseParallel, down=RowwiseParallel" if cfg["tp"] > 1 else None,
        "steps_profiled": pp_jobs.ACTIVE_STEPS,
        "warmup_steps_discarded": pp_jobs.WARMUP_STEPS,
        "profiler_steps": [f"ProfilerStep#{pp_jobs.WARMUP_STEPS + i}" for i in range(pp_jobs.ACTIVE_STEPS)],
        "pp_labels": PP_LABELS.get(cfg["schedule"]),
        "process_groups": process_groups,
        "per_rank": ranks,
    }
    return t, per_rank[0]["torch_version"]


def main():
    raw, out, jobs = sys.argv[1], sys.argv[2], sys.argv[3:]
    truth = {}
    if os.path.exists(out):
        truth = json.load(open(out))
    fixtures = truth.get("fixtures", {})
    version = truth.get("torch_version")
    for job in jobs:
        fixtures[job], version = job_truth(job, raw)
    truth = {
        "about": "What tests/data/torch/make_fixtures.sh ran for each fixture (see README.md). "
        "Ranks are global ranks; pp/dp/tp index are the rank's coordinates on each mesh "
        "dimension; stages are pipeline stage indices (model chunks) in the order the rank "
        "holds them; actions are the schedule's per-step order, in torch.distributed.pipelining's "
        "notation <stage><type><micro-batch> (F forward, B full backward, I input-grad, W weight-grad).",
        "torch_version": version,
        "backend": "gloo",
        "device": "cpu",
        "fixtures": {k: fixtures[k] for k in pp_jobs.JOBS if k in fixtures},
    }
    with open(out, "w") as f:
        json.dump(truth, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
