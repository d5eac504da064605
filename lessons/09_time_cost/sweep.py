#!/usr/bin/env python3
"""Lesson 09's sweeps: one knob at a time, each configuration run several times in turn.

  lessons/09_time_cost/sweep.py batch        per-rank batch size 16 .. 256 (2 ranks, CNN)
  lessons/09_time_cost/sweep.py buckets      bucket cap 1, 5, 25, 100 MiB, one bucket (wide MLP)
  lessons/09_time_cost/sweep.py accumulate   no_sync: synchronise every 1, 2, 4, 8 steps
  lessons/09_time_cost/sweep.py data         DataLoader workers, prefetch, pinned memory, slow storage
  lessons/09_time_cost/sweep.py precision    fp32 vs bf16
  lessons/09_time_cost/sweep.py backend      mpi vs nccl (needs a GPU per rank)
  lessons/09_time_cost/sweep.py scaling      1-4 ranks, weak and strong, and the model's prediction
  lessons/09_time_cost/sweep.py twohost      two hosts over an emulated link (root; tools/twohost)
  lessons/09_time_cost/sweep.py all          all of them
Options: --build-dir build, --out DIR (tables, JSON lines, PNGs), --repeats R, --steps S.

Every configuration runs --repeats times; the configurations take turns (A B C A B C ...),
so a machine busy with other work slows all of them alike; the table shows the median step
time with its min and max, and the load average before and after. Each run is the
reference build's `train` of lesson 09 under tools/mpirun, with one thread per rank
(OMP_NUM_THREADS=1 for the library's loops and its matrix products' blocks,
OPENBLAS_NUM_THREADS=1: a rank stands for one device), and --steps measured steps after
warm-up.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PHASES = ["data_wait", "h2d", "forward", "backward", "exposed_comm", "optimizer", "other"]


def load():
    return os.getloadavg()[0]


class Runner:
    def __init__(self, args):
        self.args = args
        self.train = os.path.join(args.build_dir, "solutions", "09_time_cost", "train")
        if not os.path.exists(self.train):
            sys.exit(f"sweep: {self.train} not found: build it (ninja -C {args.build_dir} "
                     "solutions-09_time_cost)")
        self.tmp = tempfile.mkdtemp(prefix="sweep-")
        self.runs = 0

    def run(self, ranks, flags, timeout=600):
        """One run of train on `ranks` ranks; returns its last metrics line."""
        self.runs += 1
        metrics = os.path.join(self.tmp, f"run{self.runs}.jsonl")
        steps = os.path.join(self.tmp, f"run{self.runs}_steps.jsonl")
        cmd = [os.path.join(ROOT, "tools", "mpirun"), "-np", str(ranks), "-x", "OPENBLAS_NUM_THREADS",
               "-x", "OMP_NUM_THREADS", self.train, "--data", self.args.data, "--metrics", metrics,
               "--breakdown", steps] + flags
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
        before = load()
        t0 = time.monotonic()
        r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=timeout)
        if r.returncode != 0:
            sys.exit(f"sweep: run failed (exit status {r.returncode}):\n$ {' '.join(cmd)}\n"
                     + r.stdout[-3000:])
        with open(metrics) as f:
            lines = [json.loads(l) for l in f if l.strip()]
        row = dict(lines[-1])
        # The epoch's mean breakdown (the metrics line's *_ms fields) and the buckets of the
        # last measured step.
        row["phases_ms"] = {p: row.get(p + "_ms", 0.0) for p in PHASES}
        row["step_ms"] = row.get("measured_step_ms", row["step_ms"])
        with open(steps) as f:
            measured = [json.loads(l) for l in f if l.strip()]
        measured = [m for m in measured if m.get("measured") and m.get("rank") == 0]
        row["buckets"] = measured[-1]["buckets"] if measured else []
        row["steps_file"] = steps
        row["samples_per_s"] = row["global_batch"] / (row["step_ms"] / 1e3)
        row["wall_s"] = time.monotonic() - t0
        row["load"] = [before, load()]
        row["curve"] = lines
        return row


def measure(runner, configs, repeats):
    """configs: [(label, x, ranks, flags)]. Runs each `repeats` times, in turns."""
    results = {label: [] for label, *_ in configs}
    for rep in range(repeats):
        for label, x, ranks, flags in configs:
            row = runner.run(ranks, flags)
            results[label].append(row)
            print(f"  [{rep + 1}/{repeats}] {label:>14}: step {row['step_ms']:8.2f} ms "
                  f"(load {row['load'][0]:.1f})", flush=True)
    out = []
    for label, x, ranks, flags in configs:
        rows = sorted(results[label], key=lambda r: r["step_ms"])
        mid = rows[len(rows) // 2]
        out.append({"label": label, "x": x, "world_size": ranks, "flags": flags,
                    "step_ms": mid["step_ms"], "step_ms_min": rows[0]["step_ms"],
                    "step_ms_max": rows[-1]["step_ms"], "samples_per_s": mid["samples_per_s"],
                    "phases_ms": mid["phases_ms"], "test_acc": mid.get("test_acc"),
                    "global_batch": mid.get("global_batch"),
                    "batch_per_rank": mid.get("batch_per_rank"),
                    "buckets": mid.get("buckets"), "curve": mid["curve"],
                    "steps_file": mid["steps_file"],
                    "load": [min(r["load"][0] for r in rows), max(r["load"][1] for r in rows)]})
    return out


def print_table(name, rows, extra=()):
    print(f"\n{name}: median step time over runs [min, max], the median run's phases (ms)")
    head = f"{'config':>14} {'ranks':>5} {'step_ms':>8} {'[min, max]':>17} {'samples/s':>9} "
    head += " ".join(f"{p[:9]:>9}" for p in PHASES)
    for key, _ in extra:
        head += f" {key:>9}"
    print(head)
    for r in rows:
        line = (f"{r['label']:>14} {r['world_size']:5d} {r['step_ms']:8.2f} "
                f"[{r['step_ms_min']:7.2f}, {r['step_ms_max']:7.2f}] {r['samples_per_s']:9.0f} ")
        line += " ".join(f"{r['phases_ms'].get(p, 0):9.2f}" for p in PHASES)
        for key, fmt in extra:
            v = r.get(key)
            line += f" {fmt.format(v) if v is not None else '-':>9}"
        print(line)
    lo = min(r["load"][0] for r in rows)
    hi = max(r["load"][1] for r in rows)
    print(f"(load average {lo:.1f} .. {hi:.1f} on {os.cpu_count()} cores during the runs)")


def write(args, name, rows):
    path = os.path.join(args.out, f"{name}.jsonl")
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps({k: v for k, v in r.items() if k not in ("curve", "steps_file")}) + "\n")
    return path


def load_note(rows):
    """The load next to the numbers, for a plot's title."""
    lo = min(r["load"][0] for r in rows)
    hi = max(r["load"][1] for r in rows)
    return f"\n(load average {lo:.1f} .. {hi:.1f} on {os.cpu_count()} cores; medians of runs in turns)"


def plot(args, kind, inputs, png, *extra):
    cmd = [sys.executable, os.path.join(ROOT, "tools", "plot"), kind] + inputs + \
          ["-o", os.path.join(args.out, png)] + list(extra)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(r.stdout.strip())


def common_flags(args, model, steps=None):
    return ["--model", model, "--epochs", "1", "--steps", str(steps or args.steps),
            "--warmup-steps", str(args.warmup), "--no-eval"]


# ---- the sweeps -----------------------------------------------------------------------------
def sweep_batch(args, runner):
    configs = [(f"batch {b}", b, 2, common_flags(args, "cnn") + ["--batch-size", str(b)])
               for b in (16, 32, 64, 128, 256)]
    rows = measure(runner, configs, args.repeats)
    print_table("batch size (2 ranks, CNN)", rows)
    path = write(args, "batch", rows)
    plot(args, "breakdown", [path], "batch_breakdown.png", "--title",
         "per-rank batch size: where a step's time goes (2 ranks, CNN)" + load_note(rows))


def sweep_buckets(args, runner):
    caps = [("1 MiB", 1, "1"), ("5 MiB", 5, "5"), ("25 MiB", 25, "25"), ("100 MiB", 100, "100"),
            ("one bucket", 1000, "1000000")]
    configs = [(label, x, 2, common_flags(args, "wide-mlp") + ["--bucket-cap-mb", cap])
               for label, x, cap in caps]
    rows = measure(runner, configs, args.repeats)
    for r in rows:
        r["n_buckets"] = len(r["buckets"] or [])
    print_table("bucket cap (2 ranks, wide MLP)", rows, [("n_buckets", "{:d}")])
    path = write(args, "buckets", rows)
    plot(args, "breakdown", [path], "buckets_breakdown.png", "--title",
         "bucket cap: where a step's time goes (2 ranks, wide MLP)" + load_note(rows))
    plot(args, "sweep", [path], "buckets.png", "--y", "step_ms,exposed_comm,backward",
         "--xlabel", "bucket cap (MiB)", "--title", "bucket cap sweep (2 ranks, wide MLP)" + load_note(rows))


def sweep_accumulate(args, runner):
    # Timing: measured steps; accuracy: the same number of samples for every K.
    configs = [(f"sync every {k}", k, 2, common_flags(args, "cnn") + ["--accumulate", str(k)])
               for k in (1, 2, 4, 8)]
    rows = measure(runner, configs, args.repeats)
    print_table("no_sync accumulation (2 ranks, CNN): time per micro-batch step", rows)
    path = write(args, "accumulate", rows)
    plot(args, "breakdown", [path], "accumulate_breakdown.png", "--title",
         "no_sync: all-reduce every K micro-batches (2 ranks, CNN)" + load_note(rows))
    acc = [(f"sync every {k}", k, 2, ["--model", "mlp", "--epochs", str(args.accuracy_epochs),
                                       "--accumulate", str(k), "--warmup-steps", "0"])
           for k in (1, 2, 4, 8)]
    acc_rows = measure(runner, acc, 1)
    print(f"\naccuracy at fixed samples ({args.accuracy_epochs} epochs, MLP, 2 ranks, lr unchanged):")
    for r in acc_rows:
        print(f"  {r['label']:>14}: test_acc {r['test_acc']:.4f}, optimizer steps per epoch "
              f"{r['curve'][-1].get('optimizer_steps', '-')}")
    write(args, "accumulate_accuracy", acc_rows)
    curves = []
    for r in acc_rows:  # each run's metrics file: one line per epoch
        path = os.path.join(args.out, f"accumulate_curve_k{r['x']}.jsonl")
        with open(path, "w") as f:
            f.writelines(json.dumps(line) + "\n" for line in r["curve"])
        curves.append(path)
    plot(args, "curves", curves, "accumulate_curves.png", "--labels",
         ",".join(f"K={r['x']}" for r in acc_rows), "--title",
         f"no_sync every K micro-batches: the same samples, K times fewer optimizer steps "
         f"(MLP, 2 ranks, lr unchanged)" + load_note(acc_rows))


def sweep_data(args, runner):
    base = common_flags(args, "cnn")
    slow = ["--storage-latency-us", str(args.storage_latency_us)]
    configs = [
        ("0 workers", 0, 2, base + ["--num-workers", "0"]),
        ("1 worker", 1, 2, base + ["--num-workers", "1"]),
        ("1 w, prefetch 1", 1, 2, base + ["--num-workers", "1", "--prefetch-factor", "1"]),
        ("2 workers", 2, 2, base + ["--num-workers", "2"]),
        ("2 w, prefetch 1", 2, 2, base + ["--num-workers", "2", "--prefetch-factor", "1"]),
        ("2 w, pinned", 2, 2, base + ["--num-workers", "2", "--pin-memory"]),
        ("slow, 0 w", 10, 2, base + slow + ["--num-workers", "0"]),
        ("slow, 1 w", 11, 2, base + slow + ["--num-workers", "1"]),
        ("slow, 2 w", 12, 2, base + slow + ["--num-workers", "2"]),
        ("slow, 2 w, pf 1", 12, 2, base + slow + ["--num-workers", "2", "--prefetch-factor", "1"]),
        ("slow, 4 w", 14, 2, base + slow + ["--num-workers", "4"]),
    ]
    rows = measure(runner, configs, args.repeats)
    print_table(f"data loading (2 ranks, CNN; slow = {args.storage_latency_us} us per sample "
                "read)", rows)
    path = write(args, "data", rows)
    plot(args, "breakdown", [path], "data_breakdown.png", "--title",
         "data loading: workers, pinned memory, slow storage (2 ranks, CNN)" + load_note(rows))


def sweep_precision(args, runner):
    configs = [("fp32", 32, 2, common_flags(args, "cnn") + ["--precision", "fp32"]),
               ("bf16", 16, 2, common_flags(args, "cnn") + ["--precision", "bf16"])]
    rows = measure(runner, configs, args.repeats)
    print_table("precision (2 ranks, CNN)", rows)
    path = write(args, "precision", rows)
    plot(args, "breakdown", [path], "precision_breakdown.png", "--title",
         "fp32 vs bf16 autocast (2 ranks, CNN)" + load_note(rows))


def gpu_count():
    """GPUs that nvidia-smi lists (0 where it is missing or fails), and what it said."""
    try:
        r = subprocess.run(["nvidia-smi", "-L"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=60)
    except FileNotFoundError:
        return 0, "nvidia-smi not found: no NVIDIA driver here"
    except (OSError, subprocess.TimeoutExpired) as e:
        return 0, f"nvidia-smi: {e}"
    gpus = [l for l in r.stdout.splitlines() if l.startswith("GPU ")]
    return (len(gpus), "") if r.returncode == 0 else (0, r.stdout.strip()[-200:])


def sweep_backend(args, runner):
    ranks = 2
    gpus, why = gpu_count()
    if gpus < ranks:  # NCCL refuses two ranks on one GPU
        print(f"\nbackend: skipped: mpi vs nccl needs a GPU per rank ({ranks} ranks), and "
              f"nvidia-smi -L lists {gpus}" + (f" ({why})" if why else ""))
        return
    configs = [(b, i, ranks, common_flags(args, "cnn") + ["--device", "cuda", "--backend", b])
               for i, b in enumerate(("mpi", "nccl"))]
    rows = measure(runner, configs, args.repeats)
    print_table(f"backend ({ranks} ranks, a GPU each, CNN)", rows)
    write(args, "backend", rows)


def sweep_scaling(args, runner):
    weak = [(f"weak {n}", n, n, common_flags(args, "cnn") + ["--batch-size", "64"])
            for n in (1, 2, 3, 4)]
    strong = [(f"strong {n}", n, n, common_flags(args, "cnn") + ["--batch-size", str(256 // n)])
              for n in (1, 2, 3, 4)]
    rows = measure(runner, weak + strong, args.repeats)
    print_table("scaling (CNN; weak: 64 per rank; strong: 256 in all)", rows)
    measured = []
    for r in rows:
        mode = "weak" if r["label"].startswith("weak") else "strong"
        measured.append({"mode": mode, "world_size": r["world_size"],
                         "batch_per_rank": r["batch_per_rank"], "step_ms": r["step_ms"],
                         "samples_per_s": r["samples_per_s"], "label": r["label"],
                         "phases_ms": r["phases_ms"], "x": r["world_size"]})
    mpath = write(args, "scaling_measured", measured)
    one_rank = next(r for r in rows if r["label"] == "weak 1")
    workload = os.path.join(args.out, "one_rank_steps.jsonl")
    with open(one_rank["steps_file"]) as src, open(workload, "w") as dst:
        dst.write(src.read())
    what_if = os.path.join(args.build_dir, "solutions", "09_time_cost", "what_if")
    link = ["--allreduce", args.allreduce_csv, "--allreduce-ranks", "2"] if args.allreduce_csv else []
    if not link:
        print("\n(no --allreduce CSV: run lesson 04's bench_allreduce --csv at 2 ranks for the model)")
        return
    # The model assumes a device per rank. Here N ranks share the cores (and the machine with
    # other work): D, the devices' worth of compute the ranks really get, is fitted on the
    # 2-rank weak run alone (D = 2 c1 / c2, c = forward + backward per step); every other
    # run checks it.
    c = {r["world_size"]: r["phases_ms"]["forward"] + r["phases_ms"]["backward"]
         for r in rows if r["label"].startswith("weak")}
    devices = 2 * c[1] / c[2]
    with open(os.path.join(args.out, "devices.json"), "w") as f:
        json.dump({"devices": devices, "compute_ms": c}, f)
    print(f"\ncompute per rank (forward + backward, weak): "
          + ", ".join(f"{n} rank(s) {c[n]:.1f} ms" for n in sorted(c))
          + f"; devices fitted on the 2-rank run: D = {devices:.2f}")
    for tag, dev in (("", []), ("_shared", ["--devices", f"{devices:.3f}"])):
        out = []
        for mode, extra in (("weak", ["--batch", "64"]), ("strong", ["--global-batch", "256"])):
            pred = os.path.join(args.out, f"scaling{tag}_{mode}.jsonl")
            cmd = [what_if, "--workload", workload, "--measured", mpath, "--json", pred] + link \
                + extra + dev
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            print(r.stdout)
            with open(pred) as f:
                out += [json.loads(l) for l in f if l.strip()]
        path = os.path.join(args.out, f"scaling{tag}.jsonl")
        with open(path, "w") as f:
            for r in out:
                if "efficiency" in r:
                    f.write(json.dumps(r) + "\n")
        what = "a device per rank" if not tag else f"the ranks share D = {devices:.2f} device(s)"
        plot(args, "scaling", [path], f"scaling{tag}.png", "--title",
             f"scaling on this machine: measured vs the model ({what})" + load_note(rows))


def size_label(n):
    for unit, k in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= k:
            return f"{n / k:g} {unit}"
    return f"{n:g} B"


def plot_twohost_allreduce(args, res, alpha_beta_fitted):
    """The all-reduce measured across the link against the alpha-beta model of the link's
    settings (alpha = the delay, beta = 8 / rate) and, where what_if fitted one, of the fit."""
    rate, delay = res["rate_bps"], res["delay_s"]
    path = os.path.join(args.out, "twohost_allreduce.jsonl")
    with open(path, "w") as f:
        for i, row in enumerate(res.get("allreduce", [])):
            n = row["bytes"]  # a 2-rank ring: 2 alpha + n beta (lesson 04's formula, p = 2)
            out = {"label": size_label(n) if i % 2 == 0 else "", "x": n,
                   "measured": row["library_us"] / 1e3,
                   "model_from_link_settings": (2 * delay + n * 8 / rate) * 1e3}
            if alpha_beta_fitted:
                alpha, beta = alpha_beta_fitted
                out["model_fitted_to_these_times"] = (2 * alpha + n * beta) * 1e3
            f.write(json.dumps(out) + "\n")
    keys = "measured,model_from_link_settings" + (",model_fitted_to_these_times" if alpha_beta_fitted else "")
    plot(args, "sweep", [path], "twohost_allreduce.png", "--y", keys, "--log-y", "--xlabel",
         "message size", "--ylabel", "ms per all-reduce (2 ranks)", "--title",
         f"all-reduce across two hosts: {rate / 1e9:g} Gbit/s, {delay * 1e3:g} ms one way "
         f"({'tc netem' if res.get('link') == 'netem' else 'userspace emulator'})\n(load average {res['load_before'][0]:.1f} before, "
         f"{res['load_after'][0]:.1f} after, {res.get('cores', '?')} cores; fastest of 3 rounds)")


def sweep_twohost(args, runner):
    """Two hosts over an emulated link (tools/twohost, as root): the all-reduce and a DDP
    step measured there, beside the model's prediction from the link's rate and delay."""
    twohost = os.path.join(ROOT, "tools", "twohost")
    link = ["--rate", args.link_rate, "--delay", args.link_delay]
    result = os.path.join(args.out, "twohost.json")
    r = subprocess.run([sys.executable, twohost, "--build-dir", args.build_dir, "--out", result,
                        "--timeout", "400"] + link,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(r.stdout[-6000:])
    if r.returncode == 77:
        print("sweep: two hosts skipped (see the reason above)")
        return
    with open(result) as f:
        res = json.load(f)
    # bench_allreduce's rows as its --csv would have them, for what_if's fit.
    csv = os.path.join(args.out, "twohost_allreduce.csv")
    with open(csv, "w") as f:
        f.write("bytes,count,ring_us,ring_busbw_gbs,library_us,library_busbw_gbs,wrong\n")
        for row in res.get("allreduce", []):
            f.write(",".join(str(row[k]) for k in ("bytes", "count", "ring_us", "ring_busbw_gbs",
                                                      "library_us", "library_busbw_gbs", "wrong")) + "\n")
    # One DDP run across the link, a rank per host.
    steps = os.path.join(args.out, "twohost_steps.jsonl")
    train = os.path.join(args.build_dir, "solutions", "09_time_cost", "train")
    r = subprocess.run([sys.executable, twohost, "--timeout", "400"] + link +
                       ["--", train, "--data", args.data, "--breakdown", steps] +
                       common_flags(args, "cnn"),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(r.stdout[-3000:])
    with open(steps) as f:
        rows = [json.loads(l) for l in f if l.strip()]
    measured = [x for x in rows if x.get("measured")]
    step_ms = statistics.median(sum(x["phases_ms"].values()) for x in measured)
    print(f"two hosts: DDP step (CNN, batch 64 per rank) median {step_ms:.1f} ms over "
          f"{len(measured)} rank-steps")
    with open(os.path.join(args.out, "twohost_measured.jsonl"), "w") as f:
        f.write(json.dumps({"mode": "weak", "world_size": 2, "batch_per_rank": 64,
                            "step_ms": step_ms}) + "\n")
    print(f"twohost: link {args.link_rate}, {args.link_delay} one way; load "
          f"{res['load_before'][0]:.1f} before, {res['load_after'][0]:.1f} after")
    # The model for this link: the link's own alpha (the delay) and beta (8 / rate), and
    # alpha and beta fitted to the all-reduce measured across it; compute from the one-rank
    # run of `sweep.py scaling` (run it first), sharing the cores as fitted there.
    workload = os.path.join(args.out, "one_rank_steps.jsonl")
    if not os.path.exists(workload):
        print("(no one_rank_steps.jsonl: run `sweep.py scaling` first for the model's prediction)")
        plot_twohost_allreduce(args, res, None)
        return
    what_if = os.path.join(args.build_dir, "solutions", "09_time_cost", "what_if")
    nominal = ["--alpha-us", str(res["delay_s"] * 1e6), "--beta-ns", str(8e9 / res["rate_bps"])]
    fitted = ["--allreduce", csv, "--allreduce-ranks", "2"]
    dev = []
    try:
        with open(os.path.join(args.out, "devices.json")) as f:
            dev = ["--devices", f"{json.load(f)['devices']:.3f}"]
    except OSError:
        pass
    alpha_beta_fitted = None
    for name, link in (("the link's nominal delay and rate", nominal),
                       ("alpha and beta fitted across the link", fitted)):
        for d in ([], dev) if dev else ([],):
            print(f"\nthe model with {name}" + (f", ranks sharing {d[1]} device(s)" if d else
                                                  ", a device per rank") + ":")
            r = subprocess.run([what_if, "--workload", workload, "--ranks", "1,2", "--batch", "64",
                                "--measured", os.path.join(args.out, "twohost_measured.jsonl")]
                               + link + d, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
            print(r.stdout.strip())
            fit = re.search(r"^link: fitted .*alpha ([0-9.]+) us per message, beta ([0-9.]+) ns/B",
                            r.stdout, re.M)
            if fit:
                alpha_beta_fitted = (float(fit.group(1)) * 1e-6, float(fit.group(2)) * 1e-9)
    plot_twohost_allreduce(args, res, alpha_beta_fitted)


SWEEPS = {"batch": sweep_batch, "buckets": sweep_buckets, "accumulate": sweep_accumulate,
          "data": sweep_data, "precision": sweep_precision, "backend": sweep_backend,
          "scaling": sweep_scaling, "twohost": sweep_twohost}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sweep", choices=list(SWEEPS) + ["all"])
    p.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    p.add_argument("--out", default="sweeps", help="folder for tables, JSON lines and PNGs")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--repeats", type=int, default=3, help="runs of each configuration")
    p.add_argument("--steps", type=int, default=30, help="measured steps per run")
    p.add_argument("--warmup", type=int, default=5, help="steps before measuring")
    p.add_argument("--accuracy-epochs", type=int, default=4)
    p.add_argument("--storage-latency-us", type=int, default=4000,
                   help="data sweep: emulated read latency per sample")
    p.add_argument("--allreduce-csv", help="scaling: bench_allreduce --csv of 2 ranks (for the model)")
    p.add_argument("--link-rate", default="1gbit", help="twohost: the emulated link's rate")
    p.add_argument("--link-delay", default="0.5ms", help="twohost: its one-way delay")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    runner = Runner(args)
    print(f"sweep: {os.cpu_count()} cores, load average {load():.1f}; results in {args.out}/")
    for name in (SWEEPS if args.sweep == "all" else [args.sweep]):
        SWEEPS[name](args, runner)


if __name__ == "__main__":
    main()
