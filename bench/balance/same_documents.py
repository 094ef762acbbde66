#!/usr/bin/env python3
"""fixed, ilp and wlb over one epoch of the same documents (issue 23, bench/README.md).

Balancers compared by steps train different documents (wlb holds long ones back and trains
more short ones in the same steps), so only whole epochs compare them like for like: every
balancer trains every document once, and tokens/s against fixed is the speedup.

  1. fulcrum-train on CPU ranks (pp2, 2 ranks), median tokens/s of --rounds rounds, the
     balancers' order rotated each round;
  2. fulcrum simulate calibrated on a capture of the fixed run, the same epoch;
  3. fulcrum simulate of a 7B model on 256 GPUs at 128K and 64K context (analytic costs),
     with wlb's delay bound, and by steps to show why steps mislead.

Usage: bench/balance/same_documents.py [--build build] [--rounds 5] [--work DIR] [--cp 2]
(--cp 2: the engine on 4 ranks, pp2 x cp2, as the demo runs it)
Prints markdown tables with ratios against fixed measured in the same run.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

BALANCERS = ["fixed", "ilp", "wlb"]
ENGINE = ["--pp", "2", "--backend", "cpu", "--context", "1024", "--layers", "2", "--hidden",
          "64", "--heads", "4", "--micro-batches", "4", "--documents", "200", "--lengths",
          "long-tail:context=1024,median=128", "--seed", "3", "--epochs", "1"]
SEVEN_B = ["--layers", "32", "--hidden", "4096", "--heads", "32", "--vocab", "32000", "--dp", "4",
           "--tp", "8", "--pp", "2", "--cp", "4", "--micro-batches", "8", "--documents", "20000"]


def run(command, **kwargs):
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        sys.exit(f"failed ({result.returncode}): {' '.join(command)}\n{result.stdout}{result.stderr}")
    return result.stdout


def engine_round(build, balancer, cp):
    out = run(["mpirun", "-np", str(2 * cp), f"{build}/engine/fulcrum-train", "--balancer", balancer]
              + ENGINE + ["--cp", str(cp)])
    done = re.search(r"done: (\d+) steps, ([0-9.]+) s, (\d+) tokens/s", out)
    trained = re.search(r"trained: (\d+) documents, (\d+) tokens, .*delay mean ([0-9.]+), max (\d+)",
                        out)
    return {"steps": int(done[1]), "seconds": float(done[2]), "tokens_per_s": float(done[3]),
            "documents": int(trained[1]), "tokens": int(trained[2]),
            "mean_delay": float(trained[3]), "max_delay": int(trained[4])}


def simulate(build, args):
    return json.loads(run([f"{build}/app/fulcrum", "simulate", "--json"] + args))["results"]


def table(title, command, rows):
    print(f"\n{title}\n\n`{command}`\n")
    print("| balancer | steps | mean step | fixed's step / this | tokens | tokens/s | vs fixed | "
          "delay mean / max (steps) |")
    print("|---|---|---|---|---|---|---|---|")
    first = rows[0]["tokens_per_s"]
    for row in rows:
        print(f"| {row['balancer']} | {row['steps']} | {row['step_s'] * 1e3:,.1f} ms | "
              f"{rows[0]['step_s'] / row['step_s']:.2f}× | {row['tokens']:,} | "
              f"{row['tokens_per_s']:,.0f} | {row['tokens_per_s'] / first:.2f}× | "
              f"{row['mean_delay']:.2f} / {row['max_delay']} |")


def from_simulation(results):
    return [{"balancer": r["balancer"], "steps": len(r["steps"]), "tokens": r["tokens"],
             "step_s": r["mean_step_ns"] * 1e-9,
             "tokens_per_s": r["tokens_per_s"], "mean_delay": r["mean_delay_steps"],
             "max_delay": r["max_delay_steps"]} for r in results]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--work", default=None)
    parser.add_argument("--cp", type=int, default=1,
                        help="CP degree of the engine runs: 2 gives 4 ranks (pp2 x cp2)")
    args = parser.parse_args()
    build = os.path.abspath(args.build)
    work = args.work or tempfile.mkdtemp(prefix="fulcrum-same-documents.")
    os.environ.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                       "OMPI_MCA_rmaps_base_oversubscribe": "1",
                       "OMPI_MCA_mpi_yield_when_idle": "1"})

    # 1. The engine, rounds interleaved so that load on the machine hits every balancer alike.
    samples = {b: [] for b in BALANCERS}
    for r in range(args.rounds):
        for i in range(len(BALANCERS)):
            balancer = BALANCERS[(r + i) % len(BALANCERS)]
            samples[balancer].append(engine_round(build, balancer, args.cp))
    rows = []
    for balancer in BALANCERS:
        runs = samples[balancer]
        if len({s["tokens"] for s in runs} | {samples["fixed"][0]["tokens"]}) != 1:
            sys.exit("the balancers did not train the same tokens")
        rows.append({"balancer": balancer, "steps": runs[0]["steps"], "tokens": runs[0]["tokens"],
                     "step_s": statistics.median(s["seconds"] / s["steps"] for s in runs),
                     "tokens_per_s": statistics.median(s["tokens_per_s"] for s in runs),
                     "mean_delay": runs[0]["mean_delay"], "max_delay": runs[0]["max_delay"]})
    ranks = 2 * args.cp
    table(f"fulcrum-train, {ranks} CPU ranks (pp2 x cp{args.cp}), one epoch of {rows[0]['tokens']:,} "
          f"tokens in {samples['fixed'][0]['documents']} documents, median of {args.rounds} rounds",
          f"mpirun -np {ranks} fulcrum-train --balancer B " + " ".join(ENGINE) + f" --cp {args.cp}",
          rows)

    # 2. The simulator calibrated on a capture of the fixed epoch; S_max as the engine's.
    capture = os.path.join(work, "fixed")
    run([f"{build}/app/fulcrum", "capture", "-o", capture, "--force", "--", "mpirun", "-np",
         str(2 * args.cp), f"{build}/engine/fulcrum-train", "--balancer", "fixed"] + ENGINE
        + ["--cp", str(args.cp)])
    calibrated = ["--calibrate", f"{capture}/run.fulcrum", "--compare", "fixed,ilp,wlb",
                  "--wlb-max-tokens", "1024"]
    table("fulcrum simulate, calibrated on a capture of the fixed epoch above",
          "fulcrum simulate " + " ".join(calibrated),
          from_simulation(simulate(build, calibrated)))

    # 3. 7B on 256 GPUs (tp8 cp4 pp2 dp4), analytic costs, S_max from the memory model.
    for context, extra, what in [
            ("131072", [], "128K context, one epoch"),
            ("131072", ["--wlb-max-delay", "2"], "128K context, one epoch, --wlb-max-delay 2"),
            ("65536", [], "64K context, one epoch"),
            ("131072", ["--steps", "10"], "128K context, by steps (10): different documents")]:
        sim = SEVEN_B + ["--context", context, "--compare", "fixed,ilp,wlb"] + extra
        table(f"fulcrum simulate, 7B on 256 GPUs, {what}", "fulcrum simulate " + " ".join(sim),
              from_simulation(simulate(build, sim)))


if __name__ == "__main__":
    main()
