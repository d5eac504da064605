#!/usr/bin/env python3
"""Lesson 10's step times: ZeRO stages 0-3 on 1-4 ranks, the configurations taking turns.

Each round runs train once per (model, ranks, stage), in the same order, so a machine busy
with other work slows every configuration alike (A B C D, A B C D, ...). A run's step time
is the median of its steady steps (train drops the first two); the table gives, per
configuration, the median of the runs' medians and the lowest and highest run median, and
the load average before the first run and after the last.
  python3 lessons/10_sharding/step_sweep.py --train build/solutions/10_sharding/train \\
      --models wide-mlp --ranks 1,2,3,4 --repeats 3 --out /tmp/l10s -- --data synthetic
Writes OUT/steps.jsonl (one line per run) and OUT/steps.md (the table).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

LABELS = {0: "DDP", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3"}


def fail(message):
    print(f"step_sweep: {message}", file=sys.stderr)
    sys.exit(1)


def run_one(args, model, ranks, stage, n):
    metrics = os.path.join(args.out, f"{model}-zero{stage}-np{ranks}-run{n}.jsonl")
    cmd = [args.mpirun, "-np", str(ranks), "-x", "OMP_NUM_THREADS", args.train, "--model", model,
           "--zero", str(stage), "--epochs", "1", "--steps", str(args.steps), "--batch-size",
           str(args.batch_size), "--metrics", metrics] + args.extra
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    load = os.getloadavg()[0]
    done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        fail(f"{model} stage {stage} on {ranks} rank(s) failed (exit {done.returncode}):\n$ "
             + " ".join(cmd) + "\n" + done.stdout[-2000:])
    rows = [json.loads(line) for line in open(metrics) if "step_ms_median" in line]
    if not rows:
        fail(f"{metrics}: no epoch line with step_ms_median")
    r = rows[-1]
    print(f"  run {n}: {model} N={ranks} {LABELS[stage]:>6}: step {r['step_ms_median']:8.1f} ms "
          f"median ({r['step_ms_min']:.1f}-{r['step_ms_max']:.1f}), load {load:.1f}", flush=True)
    return {"model": model, "world_size": ranks, "zero": stage, "run": n, "load": load,
            "step_ms_median": r["step_ms_median"], "step_ms_min": r["step_ms_min"],
            "step_ms_max": r["step_ms_max"]}


def table(runs, models, ranks, stages, load_before, load_after):
    head = "| model | N | " + " | ".join(LABELS[s] for s in stages) + " |"
    lines = [head, "|---|---|" + "---|" * len(stages)]
    for model in models:
        for n in ranks:
            cells = []
            for s in stages:
                ms = [r["step_ms_median"] for r in runs
                      if r["model"] == model and r["world_size"] == n and r["zero"] == s]
                cells.append(f"{statistics.median(ms):.0f} [{min(ms):.0f}-{max(ms):.0f}]")
            lines.append(f"| {model} | {n} | " + " | ".join(cells) + " |")
    lines.append(f"\n(ms per step: the median of {len(runs) // max(1, len(models) * len(ranks) * len(stages))}"
                 f" runs' medians [lowest-highest run median]; load average {load_before:.1f} before, "
                 f"{load_after:.1f} after, {os.cpu_count()} cores)")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train", required=True, help="the lesson's train program")
    p.add_argument("--mpirun", default=os.path.join(os.path.dirname(__file__), "..", "..", "tools", "mpirun"))
    p.add_argument("--models", default="wide-mlp")
    p.add_argument("--ranks", default="1,2,3,4")
    p.add_argument("--stages", default="0,1,2,3")
    p.add_argument("--steps", type=int, default=10, help="steps per run (the first two not counted)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--repeats", type=int, default=3, help="rounds over all configurations")
    p.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of each rank")
    p.add_argument("--out", required=True, help="a folder for the metrics and results")
    p.add_argument("extra", nargs="*", help="after --: more flags for train (e.g. --data synthetic)")
    args = p.parse_args()
    if args.repeats < 1 or args.steps < 4:
        fail("--repeats must be at least 1 and --steps at least 4 (two are warm-up)")
    os.makedirs(args.out, exist_ok=True)
    models = args.models.split(",")
    ranks = [int(n) for n in args.ranks.split(",")]
    stages = [int(s) for s in args.stages.split(",")]
    load_before = os.getloadavg()[0]
    print(f"step_sweep: {os.cpu_count()} cores, load average {load_before:.1f}; "
          f"{args.threads} thread(s) per rank", flush=True)
    runs = [run_one(args, model, n, s, rep + 1)
            for rep in range(args.repeats) for model in models for n in ranks for s in stages]
    load_after = os.getloadavg()[0]
    with open(os.path.join(args.out, "steps.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in runs)
    text = table(runs, models, ranks, stages, load_before, load_after)
    with open(os.path.join(args.out, "steps.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
