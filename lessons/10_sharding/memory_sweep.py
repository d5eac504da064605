#!/usr/bin/env python3
"""Lesson 10's measurement: memory per rank at ZeRO stages 0-3 on 1-4 ranks, beside the formula.

Runs train once per (model, stage, ranks), reads the epoch line of its --metrics, and writes
  OUT/memory.jsonl   one line per run, for tools/plot memory (measured and predicted MiB)
  OUT/table.md       the chapter's table: kept and peak MiB, bytes sent, step time
Example:
  python3 lessons/10_sharding/memory_sweep.py --train build/solutions/10_sharding/train \\
      --models wide-mlp,cnn --ranks 1,2,3,4 --out /tmp/l10
  tools/plot memory /tmp/l10/memory.jsonl -o /tmp/l10/memory.png
"""
import argparse
import json
import os
import subprocess
import sys

LABELS = {0: "DDP", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3"}


def fail(message):
    print(f"memory_sweep: {message}", file=sys.stderr)
    sys.exit(1)


def run_one(args, model, stage, ranks):
    metrics = os.path.join(args.out, f"{model}-zero{stage}-np{ranks}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    cmd = [args.train, "--model", model, "--zero", str(stage), "--epochs", "1",
           "--steps", str(args.steps), "--precision", args.precision,
           "--metrics", metrics] + args.extra
    if ranks > 1 or args.mpirun_always:
        cmd = [args.mpirun, "-np", str(ranks)] + cmd
    print("+ " + " ".join(cmd), flush=True)
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        fail(f"{model} stage {stage} on {ranks} rank(s) failed (exit {done.returncode}):\n"
             + done.stdout[-2000:])
    rows = [json.loads(line) for line in open(metrics) if "kept_MiB" in line]
    if not rows:
        fail(f"{metrics}: no epoch line with kept_MiB")
    return rows[-1]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train", required=True, help="the lesson's train program")
    p.add_argument("--mpirun", default=os.path.join(os.path.dirname(__file__), "..", "..", "tools", "mpirun"))
    p.add_argument("--mpirun-always", action="store_true", help="start 1 rank through mpirun too")
    p.add_argument("--models", default="wide-mlp,cnn")
    p.add_argument("--ranks", default="1,2,3,4")
    p.add_argument("--stages", default="0,1,2,3")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--precision", default="fp32")
    p.add_argument("--out", required=True, help="a folder for the metrics and results")
    p.add_argument("extra", nargs="*", help="after --: more flags for train (e.g. --data synthetic)")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    results = []
    for model in args.models.split(","):
        for ranks in [int(n) for n in args.ranks.split(",")]:
            for stage in [int(s) for s in args.stages.split(",")]:
                r = run_one(args, model, stage, ranks)
                results.append({"model": model, "label": LABELS[stage], "zero": stage,
                                "world_size": ranks, "measured_MiB": r["kept_MiB"],
                                "predicted_MiB": r["formula_kept_MiB"], "peak_MiB": r["peak_MiB"],
                                "formula_peak_MiB": r["formula_peak_MiB"],
                                "bytes_sent_per_step": r["bytes_sent_per_step"],
                                "formula_bytes_per_step": r["formula_bytes_per_step"],
                                "collectives_per_step": r["collectives_per_step"],
                                "step_ms_median": r["step_ms_median"],
                                "step_ms_min": r["step_ms_min"], "step_ms_max": r["step_ms_max"]})
    with open(os.path.join(args.out, "memory.jsonl"), "w") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")
    lines = ["| model | N | stage | kept MiB (formula) | diff | peak MiB (formula w/o activations) "
             "| MiB sent/step (formula) | collectives | step ms median (min-max) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        diff = 100.0 * (r["measured_MiB"] - r["predicted_MiB"]) / r["predicted_MiB"]
        lines.append(
            f"| {r['model']} | {r['world_size']} | {r['label']} | {r['measured_MiB']:.2f} "
            f"({r['predicted_MiB']:.2f}) | {diff:+.2f}% | {r['peak_MiB']:.2f} ({r['formula_peak_MiB']:.2f}) "
            f"| {r['bytes_sent_per_step'] / 2**20:.2f} ({r['formula_bytes_per_step'] / 2**20:.2f}) "
            f"| {r['collectives_per_step']:.0f} | {r['step_ms_median']:.0f} "
            f"({r['step_ms_min']:.0f}-{r['step_ms_max']:.0f}) |")
    table = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(table)
    print(table)


if __name__ == "__main__":
    main()
