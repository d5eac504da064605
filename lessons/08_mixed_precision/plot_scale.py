#!/usr/bin/env python3
"""The loss scale of `train` runs over their steps, with the skipped steps marked.

  lessons/08_mixed_precision/plot_scale.py fp16.scale.jsonl -o scale.png
  lessons/08_mixed_precision/plot_scale.py a.jsonl b.jsonl --labels "2^16,2^24" -o scale.png

Input: the JSON lines `train --scale-log PATH` writes, one per step at which the scale
changed or the step was skipped, and one for the first and the last step:
  {"step": 1234, "epoch": 2, "scale": 32768.0, "skipped": true}
(step counts from 1 over the whole run). Needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import json
import os
import sys


def fail(msg):
    print(f"plot_scale: {msg}", file=sys.stderr)
    sys.exit(1)


def import_pyplot():
    """matplotlib from Debian's python3-matplotlib; where `python3` is another interpreter,
    run again under /usr/bin/python3, which sees Debian's packages."""
    try:
        import matplotlib
    except ImportError:
        debian = "/usr/bin/python3"
        if os.path.exists(debian) and os.path.realpath(sys.executable) != os.path.realpath(debian) \
                and not os.environ.get("PLOT_SCALE_REEXEC"):
            os.environ["PLOT_SCALE_REEXEC"] = "1"
            os.execv(debian, [debian] + sys.argv)
        fail("matplotlib is not installed: apt-get install python3-matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def read_log(path):
    rows = []
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    rows.append((int(row["step"]), float(row["scale"]), bool(row["skipped"])))
                except (ValueError, KeyError, TypeError) as e:
                    fail(f"{path}:{n}: not a line of train --scale-log ({e})")
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    if not rows:
        fail(f"{path} has no lines: was it written by train --scale-log with --precision fp16?")
    return sorted(rows)


def main():
    ap = argparse.ArgumentParser(description="Plot the loss scale of lesson 08's train runs.")
    ap.add_argument("logs", nargs="+", help="files written by train --scale-log")
    ap.add_argument("-o", "--output", required=True, help="the PNG to write")
    ap.add_argument("--labels", help="comma-separated names of the runs (default: file names)")
    ap.add_argument("--title", default="GradScaler: loss scale per step")
    args = ap.parse_args()
    labels = args.labels.split(",") if args.labels else [os.path.basename(p) for p in args.logs]
    if len(labels) != len(args.logs):
        fail(f"--labels names {len(labels)} runs but {len(args.logs)} files were given")
    runs = [read_log(p) for p in args.logs]
    plt = import_pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for label, rows in zip(labels, runs):
        steps = [r[0] for r in rows]
        scales = [r[1] for r in rows]
        line, = ax.step(steps, scales, where="post", label=label)
        skipped = [(r[0], r[1]) for r in rows if r[2]]
        if skipped:
            ax.plot([s for s, _ in skipped], [v for _, v in skipped], "x", color=line.get_color(),
                    label=f"{label}: {len(skipped)} skipped step(s)")
    ax.set_yscale("log", base=2)
    ax.set_xlabel("step")
    ax.set_ylabel("loss scale (after the step's update)")
    ax.set_title(args.title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        fig.savefig(args.output, dpi=110)
    except OSError as e:
        fail(f"cannot write {args.output}: {e.strerror}")
    print(f"plot_scale: wrote {args.output}")


if __name__ == "__main__":
    main()
