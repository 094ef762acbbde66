"""Jobs that make the PyTorch profiler (Kineto) trace fixtures beside this file.

make_fixtures.sh runs each job in its own torchrun launch, for example

    OMP_NUM_THREADS=1 torchrun --standalone --nproc-per-node 4 pp_jobs.py --job gpipe-pp4 --out DIR

Every rank writes, in DIR, <job>-rank<R>.json (the Chrome trace that torch.profiler
exports) and <job>-rank<R>.coords.json (what this rank ran: its pipeline stages, dp and
tp index, its process groups, the schedule's action order); make_truth.py folds the
coords into truth.json and make_fixtures.sh gzips the traces.

All jobs run on CPU with the gloo backend. The pipeline model is a stack of 8 identical
blocks (Linear(64, 64) + ReLU) cut into equal stages; a micro-batch is 4 x 32 tokens of
width 64, so every activation or gradient sent between stages is a float32 [4, 32, 64]
tensor. The profiler runs one warm-up step (profiled but discarded, so the first step's
shape inference and lazy set-up stay out of the trace) and then records two steps,
each inside the profiler's own `ProfilerStep#N` range (N = 1, 2).
"""

import argparse
import json
import os
import re

import torch
import torch.distributed as dist
import torch.nn as nn

HIDDEN = 64
MB_BATCH = 4
SEQ = 32
N_BLOCKS = 8
WARMUP_STEPS = 1
ACTIVE_STEPS = 2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(HIDDEN, HIDDEN)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.fc(x))


class Chunk(nn.Module):
    """A pipeline stage: `n` consecutive blocks of the full model."""

    def __init__(self, n):
        super().__init__()
        self.blocks = nn.Sequential(*[Block() for _ in range(n)])

    def forward(self, x):
        return self.blocks(x)


class MLP(nn.Module):
    """The tensor-parallel job's layer: a residual up/down projection."""

    def __init__(self):
        super().__init__()
        self.up = nn.Linear(HIDDEN, 4 * HIDDEN)
        self.act = nn.ReLU()
        self.down = nn.Linear(4 * HIDDEN, HIDDEN)

    def forward(self, x):
        return x + self.down(self.act(self.up(x)))


class TPModel(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.layers = nn.ModuleList([MLP() for _ in range(n)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def loss_fn(output, target):
    return nn.functional.mse_loss(output, target)


# The pipeline jobs. chunks: stages (model chunks) per rank. placement "loop": rank r
# holds stages r, r + pp, ...; "v": rank r holds stages r and 2 pp - 1 - r (ZBV).
# dp > 1 builds a DeviceMesh ("pp", "dp") and wraps each stage's module in DDP over "dp".
JOBS = {
    "gpipe-pp4": dict(schedule="ScheduleGPipe", pp=4, dp=1, tp=1, chunks=1, mbs=4, placement="loop"),
    "1f1b-pp4": dict(schedule="Schedule1F1B", pp=4, dp=1, tp=1, chunks=1, mbs=8, placement="loop"),
    "interleaved-pp2": dict(
        schedule="ScheduleInterleaved1F1B", pp=2, dp=1, tp=1, chunks=2, mbs=4, placement="loop"
    ),
    "zb-pp2": dict(schedule="ScheduleZBVZeroBubble", pp=2, dp=1, tp=1, chunks=2, mbs=4, placement="v"),
    "pp2-dp2": dict(schedule="Schedule1F1B", pp=2, dp=2, tp=1, chunks=1, mbs=4, placement="loop"),
    # No pipeline: a DeviceMesh ("dp", "tp"), ColwiseParallel/RowwiseParallel over "tp" and
    # FSDP2 (fully_shard) over "dp"; one batch of 4 x 32 per step (no micro-batches).
    "tp2-dp2": dict(schedule=None, pp=1, dp=2, tp=2, chunks=1, mbs=1, placement=None),
}

COMPUTE = re.compile(r"\d+[FBIW]\d+")  # <stage><F|B|I|W><micro-batch>, e.g. 2F0


def stage_indices(rank_in_pp, pp, chunks, placement):
    if placement == "v":
        assert chunks == 2
        return [rank_in_pp, 2 * pp - 1 - rank_in_pp]
    return [rank_in_pp + c * pp for c in range(chunks)]


def single_stage_order(schedule, stage, n_stages, mbs):
    """The compute order of ScheduleGPipe / Schedule1F1B._step_microbatches for one stage
    (their _get_pipeline_order() is only a drawing, and is off by one for 1F1B's last stage)."""
    if schedule == "ScheduleGPipe":
        return [f"{stage}F{i}" for i in range(mbs)] + [f"{stage}B{i}" for i in range(mbs)]
    assert schedule == "Schedule1F1B"
    warmup = min(mbs, n_stages - stage)
    order = [f"{stage}F{i}" for i in range(warmup)]
    fwd, bwd = warmup, 0
    while True:
        order.append(f"{stage}B{bwd}")
        bwd += 1
        if fwd == mbs:
            break
        order.append(f"{stage}F{fwd}")
        fwd += 1
    order += [f"{stage}B{i}" for i in range(bwd, mbs)]
    return order


def make_profiler(name):
    from torch.profiler import ProfilerActivity, profile, schedule

    def on_ready(prof):
        prof.export_chrome_trace(name)  # relative: the trace's traceName is just the file name

    return profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=0, warmup=WARMUP_STEPS, active=ACTIVE_STEPS, repeat=1),
        on_trace_ready=on_ready,
        record_shapes=True,
    )


def group_info(group):
    return {
        "pg_name": dist.distributed_c10d._get_process_group_name(group),
        "ranks": dist.get_process_group_ranks(group),
    }


def run_pp(job, cfg):
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining import schedules as S

    rank = dist.get_rank()
    pp, dp, chunks, mbs = cfg["pp"], cfg["dp"], cfg["chunks"], cfg["mbs"]
    assert pp * dp == dist.get_world_size()
    n_stages = pp * chunks
    per_stage = N_BLOCKS // n_stages

    dp_group = None
    if dp > 1:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (pp, dp), mesh_dim_names=("pp", "dp"))
        pp_group, dp_group = mesh["pp"].get_group(), mesh["dp"].get_group()
        pp_rank, dp_rank = mesh["pp"].get_local_rank(), mesh["dp"].get_local_rank()
    else:
        pp_group, pp_rank, dp_rank = dist.group.WORLD, rank, 0

    torch.manual_seed(0)
    full = [Chunk(per_stage) for _ in range(n_stages)]  # the same weights on every rank
    mine = stage_indices(pp_rank, pp, chunks, cfg["placement"])
    stages = []
    for s in mine:
        mod = full[s]
        if dp_group is not None:
            from torch.nn.parallel import DistributedDataParallel as DDP

            mod = DDP(mod, process_group=dp_group)
        stages.append(PipelineStage(mod, s, n_stages, torch.device("cpu"), group=pp_group))

    sched_cls = getattr(S, cfg["schedule"])
    if chunks == 1:
        sched = sched_cls(stages[0], n_microbatches=mbs, loss_fn=loss_fn)
    else:
        sched = sched_cls(stages, n_microbatches=mbs, loss_fn=loss_fn)
    opt = torch.optim.SGD([p for st in stages for p in st.submod.parameters()], lr=0.01)

    # Each dp replica reads its own data; the pp ranks of one replica share it.
    gen = torch.Generator().manual_seed(1000 + dp_rank)
    has_first, has_last = 0 in mine, (n_stages - 1) in mine

    with make_profiler(f"{job}-rank{rank}.json") as prof:
        for _ in range(WARMUP_STEPS + ACTIVE_STEPS):
            x = torch.randn(mbs * MB_BATCH, SEQ, HIDDEN, generator=gen)
            y = torch.randn(mbs * MB_BATCH, SEQ, HIDDEN, generator=gen)
            opt.zero_grad()
            kwargs = {"target": y, "losses": []} if has_last else {}
            if has_first:
                sched.step(x, **kwargs)
            else:
                sched.step(**kwargs)
            opt.step()
            prof.step()

    # The order the schedule runs this rank's actions in, each step.
    if hasattr(sched, "pipeline_order_with_comms"):  # multi-stage runtime schedules run this list
        actions = [str(a) for a in sched.pipeline_order_with_comms[pp_rank]]
    else:
        actions = single_stage_order(cfg["schedule"], mine[0], n_stages, mbs)
    coords = {
        "rank": rank,
        "pp_index": pp_rank,
        "dp_index": dp_rank,
        "tp_index": 0,
        "stages": mine,
        "blocks": [list(range(s * per_stage, (s + 1) * per_stage)) for s in mine],
        "actions": actions,
        "compute_order": [a for a in actions if COMPUTE.fullmatch(a)],
        "groups": {"pp": group_info(pp_group)},
    }
    if dp_group is not None:
        coords["groups"]["dp"] = group_info(dp_group)
    return coords


def run_tp_dp(job):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    tp_mesh, dp_mesh = mesh["tp"], mesh["dp"]
    torch.manual_seed(0)
    model = TPModel(2)
    for layer in model.layers:
        parallelize_module(layer, tp_mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    for layer in model.layers:
        fully_shard(layer, mesh=dp_mesh)
    fully_shard(model, mesh=dp_mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    dp_rank = dp_mesh.get_local_rank()
    gen = torch.Generator().manual_seed(1000 + dp_rank)  # the tp ranks of a replica share data

    with make_profiler(f"{job}-rank{rank}.json") as prof:
        for _ in range(WARMUP_STEPS + ACTIVE_STEPS):
            x = torch.randn(MB_BATCH, SEQ, HIDDEN, generator=gen)
            y = torch.randn(MB_BATCH, SEQ, HIDDEN, generator=gen)
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
            prof.step()

    return {
        "rank": rank,
        "pp_index": 0,
        "dp_index": dp_rank,
        "tp_index": tp_mesh.get_local_rank(),
        "stages": [0],
        "groups": {"dp": group_info(dp_mesh.get_group()), "tp": group_info(tp_mesh.get_group())},
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--job", required=True, choices=sorted(JOBS))
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    os.chdir(args.out)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    try:
        coords = run_tp_dp(args.job) if args.job == "tp2-dp2" else run_pp(args.job, JOBS[args.job])
        coords["groups"]["world"] = group_info(dist.group.WORLD)
        coords["pg_config"] = dist.distributed_c10d._get_all_pg_configs()
        coords["torch_version"] = torch.__version__
        with open(f"{args.job}-rank{dist.get_rank()}.coords.json", "w") as f:
            json.dump(coords, f, indent=1)
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
