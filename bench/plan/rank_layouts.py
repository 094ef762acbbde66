#!/usr/bin/env python3
"""fulcrum plan's ranking against measured layouts (issue 16, "Proof on real runs").

On one workload, every layout of --world CPU ranks that fulcrum plan proposes is run with
fulcrum-train, and the plan's predicted tokens/s is compared with the measured:

  1. the calibration runs captured (`fulcrum capture -- mpirun -np N fulcrum-train ...`), one
     epoch of the same documents each: --calibration-layouts, default pp2,tp2,tp2sp,cp2,dp2
     (2 ranks each, a core each on this machine): every cost the plan needs is fitted on the
     run that ran it (pipeline receives on pp2, TP's all-reduce on tp2, its all-gather and
     reduce-scatter on tp2sp, CP's on cp2, the DP all-reduce on dp2), nothing taken from the
     analytic (H100) model;
  2. `fulcrum plan --calibrate RUN1 --calibrate RUN2 ... --world N --json` with the engine's
     model shape (vocabulary 256: bytes), fp32, the same documents, a global batch of 2N
     sequences (m = 2N/dp) and the epoch's full steps; every candidate it ranks is kept;
  3. each candidate's printed fulcrum-train line, with `--steps 1` replaced by `--epochs 1` so
     that every layout trains the same documents once (tokens/s over the same tokens), run
     --rounds times, the order rotated each round so that load on the machine hits every
     layout alike; the median is kept;
  4. a markdown table: predicted and measured tokens/s, the rank by each, Spearman's rho
     (average ranks for ties) and the plan's first choice against the best measured layout;
     also written to WORK/result-N.md, with every sample in WORK/result-N.json.

Usage: bench/plan/rank_layouts.py [--world 2] [--rounds 3] [--build build] [--train PATH]
       [--work DIR] [--calibration-layouts pp2,tp2,tp2sp,cp2,dp2] [--plan-args "..."]
       [--plan-only] [--measured WORK/result-N.json] [--reuse-calibrations]
A calibration layout is degrees by name, the others 1, and "sp" for sequence parallelism:
pp2, tp2sp, pp2cp2 (4 ranks). At --world 2 each rank has a core of this 2-core machine; at 4
two ranks share one, which the simulator plays as processor sharing (docs/simulate.md, "Ranks
that share cores"; bench/README.md, "fulcrum plan against measured layouts").
"""
import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

MODEL = ["--layers", "4", "--hidden", "64", "--heads", "4", "--context", "512"]
DATA = ["--lengths", "long-tail:context=512,median=64", "--seed", "3"]


def run(command, **kwargs):
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=600, **kwargs)
    except subprocess.TimeoutExpired:
        sys.exit(f"no end after 600 s: {shlex.join(command)}")
    if result.returncode != 0:
        sys.exit(f"failed ({result.returncode}): {shlex.join(command)}\n"
                 f"{result.stdout[-4000:]}{result.stderr[-4000:]}")
    return result.stdout


def parse_train(out):
    done = re.search(r"done: (\d+) steps, ([0-9.]+) s, (\d+) tokens/s", out)
    trained = re.search(r"trained: (\d+) documents, (\d+) tokens", out)
    if not done or not trained:
        sys.exit("fulcrum-train printed no 'done:'/'trained:' line:\n" + out[-2000:])
    return {"steps": int(done[1]), "seconds": float(done[2]), "tokens_per_s": float(done[3]),
            "documents": int(trained[1]), "tokens": int(trained[2])}


def layout_name(c):
    name = f"dp{c['dp']} tp{c['tp']} pp{c['pp']} cp{c['cp']}"
    schedule = c["schedule"] + (f" x{c['virtual_stages']}" if c["virtual_stages"] > 1 else "")
    if c["pp"] > 1:
        name += " " + schedule
    if c["sequence_parallel"]:
        name += " sp"
    if c["recompute"] != "none":
        name += f" {c['recompute']} recompute"
    if c["stage_layers"]:
        name += " layers " + "/".join(str(n) for n in c["stage_layers"])
    name += f" {c['balancer']}"
    if c["cp"] > 1:
        name += f" {c['cp_shard']}"
    return name


def parse_layout(name):
    """pp2, tp2sp, pp2cp2: degrees by name (the others 1), sp for sequence parallelism."""
    found = re.fullmatch(r"((?:dp|tp|pp|cp)\d+)+(sp)?", name)
    if not found:
        sys.exit(f"--calibration-layouts: '{name}' is not a layout such as pp2, tp2sp or pp2cp2")
    layout = {"dp": 1, "tp": 1, "pp": 1, "cp": 1, "sp": name.endswith("sp")}
    for dim, degree in re.findall(r"(dp|tp|pp|cp)(\d+)", name):
        layout[dim] = int(degree)
    if layout["sp"] and layout["tp"] < 2:
        sys.exit(f"--calibration-layouts: '{name}': sequence parallelism needs tp ≥ 2")
    return layout


def train_command(candidate, train):
    """The plan's fulcrum-train line, run by `train`, over one epoch instead of its steps."""
    words = shlex.split(candidate["train_command"])
    if words[:2] != ["mpirun", "-np"] or words[3] != "fulcrum-train":
        sys.exit("unexpected train_command: " + candidate["train_command"])
    args = words[4:]
    if "--steps" in args:
        i = args.index("--steps")
        del args[i:i + 2]
    return ["mpirun", "-np", words[2], train, "--backend", "cpu"] + args + ["--epochs", "1"]


def average_ranks(values, descending=True):
    order = sorted(range(len(values)), key=lambda i: -values[i] if descending else values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(a, b):
    ra, rb = average_ranks(a), average_ranks(b)
    ma, mb = statistics.fmean(ra), statistics.fmean(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    var = (sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb)) ** 0.5
    return cov / var if var else float("nan")


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="\n".join(__doc__.splitlines()[2:]),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world", type=int, default=2, help="ranks of every layout (2 or 4)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each layout; the median")
    parser.add_argument("--build", default="build", help="build directory (app/fulcrum)")
    parser.add_argument("--train", default=None,
                        help="fulcrum-train to measure with (default BUILD/engine/fulcrum-train; "
                             "one that knows --stage-layers if the plan prints it)")
    parser.add_argument("--work", default=None, help="where the capture and plan go")
    # 205, not 200: at 200 the epoch's last step leaves one DP replica of dp2 m2 without a
    # micro-batch, which fulcrum-train with --overlap-grad-reduce on does not survive (it
    # hangs) and fulcrum simulate refuses (bench/README.md); 205 fills every replica at N = 2, 4.
    parser.add_argument("--documents", type=int, default=205)
    parser.add_argument("--global-batch", type=int, default=None,
                        help="sequences of 512 tokens a step (default 2 x world: m = 2N/dp)")
    parser.add_argument("--calibration-layouts", default=None,
                        help="the calibration runs, comma-separated: degrees by name (the others "
                             "1) and sp for sequence parallelism, e.g. pp2,tp2,tp2sp,cp2,dp2; "
                             "default: each dimension over the whole world (at --world 4: "
                             "pp4,tp4,tp4sp,cp4,dp4), so that the runs share the cores as the "
                             "layouts they calibrate do")
    parser.add_argument("--plan-args", default="",
                        help="more fulcrum plan options, e.g. to narrow the search at --world 4")
    parser.add_argument("--measured", default=None,
                        help="WORK/result-N.json of an earlier run: rank this plan against its "
                             "measurements instead of measuring again (to compare calibrations)")
    parser.add_argument("--reuse-calibrations", action="store_true",
                        help="keep the calibration runs already in WORK (with --measured: "
                             "another fulcrum's plan against the same runs and measurements)")
    parser.add_argument("--plan-only", action="store_true",
                        help="capture and plan, print the plan's ranking, measure nothing")
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    fulcrum = f"{build}/app/fulcrum"
    train = os.path.abspath(args.train or f"{build}/engine/fulcrum-train")
    work = args.work or tempfile.mkdtemp(prefix="fulcrum-rank-layouts.")
    os.makedirs(work, exist_ok=True)
    os.environ.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                       "OMPI_MCA_rmaps_base_oversubscribe": "1",
                       "OMPI_MCA_mpi_yield_when_idle": "1"})
    world = args.world
    batch = args.global_batch or 2 * world
    documents = ["--documents", str(args.documents)]

    # 1. The calibration runs: one epoch each, 1F1B, fixed packing.
    captures, calibration_lines, full_steps = [], [], None
    n = args.world
    layouts = args.calibration_layouts or f"pp{n},tp{n},tp{n}sp,cp{n},dp{n}"
    for name in layouts.split(","):
        layout = parse_layout(name)
        ranks = layout["dp"] * layout["tp"] * layout["pp"] * layout["cp"]
        calibration = ["--backend", "cpu"]
        for dim in ("dp", "tp", "pp", "cp"):
            calibration += [f"--{dim}", str(layout[dim])]
        calibration += ["--micro-batches", str(max(1, batch // layout["dp"]))]
        calibration += ["--sequence-parallel"] if layout["sp"] else []
        calibration += MODEL + DATA + documents + ["--epochs", "1"]
        capture = os.path.join(work, f"calibration-{name}")
        if args.reuse_calibrations and os.path.exists(f"{capture}/run.fulcrum"):
            with open(f"{capture}.out") as f:
                out = f.read()
        else:
            out = run([fulcrum, "capture", "-o", capture, "--force", "--", "mpirun", "-np",
                       str(ranks), train] + calibration)
            with open(f"{capture}.out", "w") as f:
                f.write(out)
        found = re.search(r"done: (\d+) steps", out)
        if not found:
            sys.exit(f"the calibration run {name} printed no 'done:' line:\n" + out[-2000:])
        # The epoch's full steps at the plan's batch: its last step is partial, and fulcrum
        # simulate refuses a step in which a DP replica gets no micro-batch (bench/README.md),
        # which dp = N would meet.
        if batch // layout["dp"] * layout["dp"] == batch:
            full_steps = int(found[1]) - 1
        captures.append(f"{capture}/run.fulcrum")
        calibration_lines.append(f"mpirun -np {ranks} fulcrum-train {shlex.join(calibration)}")
        print(f"captured {name}: {capture}", file=sys.stderr)
    if full_steps is None:
        sys.exit("no calibration layout splits the global batch evenly over its DP replicas")

    # 2. The plan over the same model, documents and steps, every candidate printed.
    plan_command = [fulcrum, "plan"] + [w for c in captures for w in ("--calibrate", c)] + [
                    "--world", str(world), "--gpus-per-node", str(world), "--vocab", "256", "--dtype",
                    "fp32", "--global-batch", str(batch), "--steps", str(full_steps),
                    "--top", "1000", "--json"] + MODEL + DATA + documents \
        + shlex.split(args.plan_args)
    started = time.monotonic()
    plan = json.loads(run(plan_command))
    plan_seconds = time.monotonic() - started
    candidates = plan["ranked"]
    with open(os.path.join(work, f"plan-{world}.json"), "w") as f:
        json.dump(plan, f, indent=1)
    print(f"plan: {len(candidates)} candidates in {plan_seconds:.1f} s; derived costs: "
          f"{plan['derived_costs'] or 'none'}", file=sys.stderr)
    if args.plan_only:
        for i, c in enumerate(candidates):
            print(f"{i + 1}. {layout_name(c)}: {c['tokens_per_second']:,.0f} tokens/s "
                  f"({c['cost_source']})")
        return

    # 3. Every candidate over one epoch, rounds rotated by a fraction of the list each round.
    samples = [[] for _ in candidates]
    n = len(candidates)
    if args.measured:
        # Another plan (other calibration runs) against measurements already taken.
        with open(args.measured) as f:
            before = {entry["layout"]: entry["samples"] for entry in json.load(f)["layouts"]}
        for k, c in enumerate(candidates):
            if layout_name(c) not in before:
                sys.exit(f"--measured {args.measured} has no {layout_name(c)}: measure again")
            samples[k] = before[layout_name(c)]
    for r in range(0 if args.measured else args.rounds):
        offset = r * n // args.rounds
        for i in range(n):
            k = (offset + i) % n
            samples[k].append(parse_train(run(train_command(candidates[k], train))))
            print(f"round {r + 1}/{args.rounds}, {i + 1}/{n}: {layout_name(candidates[k])}: "
                  f"{samples[k][-1]['tokens_per_s']:.0f} tokens/s", file=sys.stderr)
    tokens = {s["tokens"] for runs in samples for s in runs}
    if len(tokens) != 1:
        sys.exit(f"the layouts did not train the same tokens: {sorted(tokens)}")

    predicted = [c["tokens_per_second"] for c in candidates]
    measured = [statistics.median(s["tokens_per_s"] for s in runs) for runs in samples]
    spread = [max(s["tokens_per_s"] for s in runs) / min(s["tokens_per_s"] for s in runs)
              for runs in samples]
    predicted_rank = average_ranks(predicted)
    measured_rank = average_ranks(measured)
    best = max(measured)
    rho = spearman(predicted, measured)

    # 4. The table, in the plan's order, printed and kept with every sample.
    lines = [f"fulcrum plan against fulcrum-train, {world} CPU ranks, one epoch of "
             f"{tokens.pop():,} tokens in {args.documents} documents ({batch} sequences of 512 "
             f"tokens a step), median of {args.rounds} rounds", ""]
    lines += [f"`fulcrum capture -- {line}`" for line in calibration_lines] + [""]
    lines += [f"`{shlex.join(['fulcrum'] + plan_command[1:])}` "
              f"({plan['counts']['simulated']} simulated, {plan_seconds:.1f} s)", ""]
    lines += [f"derived: {note}" for note in plan["derived_costs"]]
    lines += ["", "| plan rank | layout | m | predicted tokens/s | measured tokens/s | "
              "max/min of rounds | measured rank | vs best measured |",
              "|---|---|---|---|---|---|---|---|"]
    for i, c in enumerate(candidates):
        lines.append(f"| {predicted_rank[i]:g} | {layout_name(c)} | {c['microbatches']} | "
                     f"{predicted[i]:,.0f} | {measured[i]:,.0f} | {spread[i]:.2f} | "
                     f"{measured_rank[i]:g} | {measured[i] / best:.2f}× |")
    first = max(range(n), key=lambda i: predicted[i])
    fastest = max(range(n), key=lambda i: measured[i])
    lines += ["", f"Spearman's rho (predicted, measured tokens/s), {n} layouts: **{rho:.2f}** "
              f"(target ≥ 0.8)",
              f"The plan's first choice, {layout_name(candidates[first])}: "
              f"{measured[first]:,.0f} tokens/s measured, **{measured[first] / best:.2f}×** the "
              f"best measured, {layout_name(candidates[fastest])} ({best:,.0f}; target ≥ 0.95×)",
              f"Spread of the rounds (max/min): median {statistics.median(spread):.2f}, "
              f"largest {max(spread):.2f}; load average at the end "
              f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}"]
    print("\n" + "\n".join(lines))
    with open(os.path.join(work, f"result-{world}.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(work, f"result-{world}.json"), "w") as f:
        json.dump({"rho": rho, "first_vs_best": measured[first] / best,
                   "layouts": [{"layout": layout_name(c), "predicted": predicted[i],
                                "measured": measured[i], "samples": samples[i]}
                               for i, c in enumerate(candidates)]}, f, indent=1)
    print(f"\nwork: {work}", file=sys.stderr)


if __name__ == "__main__":
    main()
