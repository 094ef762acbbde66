#!/usr/bin/env python3
"""Megatron-LM-named traces, built from real ones (docs/import.md, "The 4D structure of a
PyTorch run"). Megatron-LM needs CUDA, which this machine lacks, so this fixture is made from
the real pp2-dp2 traces (Schedule1F1B over pp, DDP over dp, gloo on CPU) by giving them the
process groups Megatron-LM creates for TP 2 x PP 2 x DP 2 (megatron/core/parallel_state.py:
rank order tp-cp-dp-pp, group_desc TENSOR_MODEL_PARALLEL_GROUP, DATA_PARALLEL_GROUP,
PIPELINE_MODEL_PARALLEL_GROUP, and groups that name no dimension: MODEL_PARALLEL_GROUP,
EMBEDDING_GROUP, DATA_PARALLEL_GROUP_WITH_CP). Rank r (tp = r % 2, dp = r // 2 % 2,
pp = r // 4) is a copy of pp2-dp2's rank with the same pp and dp; its events are unchanged
(Megatron-LM's 1F1B, like torch's, labels no pass). Writes megatron-like-rankR.json.gz and
megatron-like.json (each rank's coordinates and the source it copies).

    tests/data/torch/make_megatron_like.py
"""
import gzip
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
TP, DP, PP = 2, 2, 2


def rank_of(tp, dp, pp):
    return tp + TP * (dp + DP * pp)


def groups(r):
    tp, dp, pp = r % TP, r // TP % DP, r // (TP * DP)
    made = [
        ("default_pg", list(range(TP * DP * PP))),
        ("TENSOR_MODEL_PARALLEL_GROUP", [rank_of(t, dp, pp) for t in range(TP)]),
        ("DATA_PARALLEL_GROUP", [rank_of(tp, d, pp) for d in range(DP)]),
        ("DATA_PARALLEL_GROUP_WITH_CP", [rank_of(tp, d, pp) for d in range(DP)]),
        ("PIPELINE_MODEL_PARALLEL_GROUP", [rank_of(tp, dp, p) for p in range(PP)]),
        ("MODEL_PARALLEL_GROUP", sorted(rank_of(t, dp, p) for t in range(TP) for p in range(PP))),
        ("EMBEDDING_GROUP", [rank_of(tp, dp, 0), rank_of(tp, dp, PP - 1)]),
    ]
    return [{"pg_name": str(i), "pg_desc": desc, "backend_config": "cuda:nccl",
             "pg_size": len(ranks), "ranks": ranks} for i, (desc, ranks) in enumerate(made)]


def main():
    truth = {"about": __doc__.splitlines()[0], "ranks": []}
    for r in range(TP * DP * PP):
        tp, dp, pp = r % TP, r // TP % DP, r // (TP * DP)
        source = f"pp2-dp2-rank{pp * DP + dp}.json.gz"
        with gzip.open(os.path.join(HERE, source), "rt") as f:
            trace = json.load(f)
        trace["distributedInfo"] = {"backend": "nccl", "rank": r, "world_size": TP * DP * PP,
                                    "pg_count": 7, "pg_config": groups(r)}
        name = f"megatron-like-rank{r}.json.gz"
        with gzip.GzipFile(os.path.join(HERE, name), "wb", compresslevel=9, mtime=0) as out:
            out.write(json.dumps(trace).encode())
        truth["ranks"].append({"rank": r, "file": name, "tp": tp, "dp": dp, "pp": pp,
                               "copy_of": source})
    with open(os.path.join(HERE, "megatron-like.json"), "w") as out:
        json.dump(truth, out, indent=1)
        out.write("\n")


if __name__ == "__main__":
    main()
