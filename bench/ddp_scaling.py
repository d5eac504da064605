#!/usr/bin/env python3
"""DDP scaling on this machine: bench_ddp at 1 and 2 ranks (or --ranks), then one table.

  bench/ddp_scaling.py                          lesson 01's CNN and a wide MLP, 1 and 2 ranks
  bench/ddp_scaling.py --models cnn --ranks 1 2 4 --steps 30
  bench/ddp_scaling.py --build-dir build-cuda --device cuda

Prints, per model and rank count, the samples/s of the default configuration (PyTorch's
bucket caps: 25 MiB, the first bucket 1 MiB) and the scaling efficiency samples/s(W) / (W * samples/s(1)); beside it the
same for the bare model without DDP on every rank ("no comm"), which separates what the
ranks lose by sharing the machine from what communication costs; then, at the
largest rank count, bench_ddp's bucket sweep (step time, exposed wait, share of the
all-reduce hidden behind backward) on the --sweep-models (the wide MLP: its 19 MiB of
gradients make 6, 3, 2 and 1 buckets at caps 1, 5, 10 and one; the CNN's 1.6 MiB fit in
one). Every rank gets OPENBLAS_NUM_THREADS and OMP_NUM_THREADS = --threads (1 by default),
so on the CPU one rank stands for one device. The machine, its cores and its
load average are printed with the numbers: compare runs only on an otherwise idle machine.
"""
import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

DEFAULT = "default 1+25"  # bench_ddp's name for PyTorch's default bucket caps

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def run_bench(args, nprocs, model, caps, out_json):
    exe = os.path.join(args.build_dir, "bench", "bench_ddp")
    if not os.path.exists(exe):
        sys.exit(f"{exe} not found: build it with `ninja -C {args.build_dir} bench/bench_ddp`")
    mpirun = os.path.join(ROOT, "tools", "mpirun")  # oversubscribe, root, idle ranks yield
    if not shutil.which("mpirun"):
        sys.exit("mpirun not found: install Open MPI (tools/install-deps)")
    env = dict(os.environ)
    env["OPENBLAS_NUM_THREADS"] = str(args.threads)
    env["OMP_NUM_THREADS"] = str(args.threads)  # the library's own CPU loops
    cmd = [mpirun, "-np", str(nprocs), "-x", "OPENBLAS_NUM_THREADS", "-x", "OMP_NUM_THREADS"]
    cmd += [exe, "--model", model, "--caps", caps, "--steps", str(args.steps),
            "--warmup", str(args.warmup), "--batch-size", str(args.batch_size),
            "--device", args.device, "--json", out_json]
    print("$ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(r.stdout, flush=True)
    if r.returncode != 0:
        sys.exit(f"bench_ddp failed with exit status {r.returncode}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    p.add_argument("--models", nargs="+", default=["cnn", "wide"])
    p.add_argument("--ranks", nargs="+", type=int, default=[1, 2])
    p.add_argument("--caps", default="default,default+view,1,5,10,one",
                   help="bucket sweep at the largest rank count (bench_ddp --caps)")
    p.add_argument("--sweep-models", nargs="+", default=["wide"],
                   help="models that get the bucket sweep (the others: default only)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=1,
                   help="OPENBLAS_NUM_THREADS and OMP_NUM_THREADS per rank")
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", help="also write every measurement here (JSON lines)")
    args = p.parse_args()

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="ddp-scaling-") as tmp:
        out = os.path.join(tmp, "results.jsonl")
        top = max(args.ranks)
        for model in args.models:
            for n in args.ranks:
                sweep = n == top and model in args.sweep_models
                run_bench(args, n, model, ("none," + args.caps) if sweep else "none,default", out)
        with open(out) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    load_after = os.getloadavg()
    if args.json:
        with open(args.json, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")

    print(f"machine: {cpu_name()}, {os.cpu_count()} cores; OPENBLAS_NUM_THREADS=OMP_NUM_THREADS={args.threads} "
          f"per rank; load average {load_before[0]:.1f} before, {load_after[0]:.1f} after")
    print(f"\nscaling (PyTorch's default buckets: 25 MiB, the first 1 MiB; batch {args.batch_size} per rank):")
    print(f"{'model':8} {'ranks':>5} {'samples/s':>10} {'step_ms':>8} {'efficiency':>10} "
          f"{'no-comm step_ms':>16} {'no-comm eff.':>12} {'DDP overhead':>12}")

    def find(model, n, config):
        return next((r for r in rows if r["model"] == model and r["world_size"] == n
                     and r["config"] == config), None)

    for model in args.models:
        base, base_local = find(model, 1, DEFAULT), find(model, 1, "none (no DDP)")
        for n in args.ranks:
            r, local = find(model, n, DEFAULT), find(model, n, "none (no DDP)")
            if r is None or local is None:
                continue
            eff = r["samples_per_s"] / (n * base["samples_per_s"]) if base else float("nan")
            leff = (local["samples_per_s"] / (n * base_local["samples_per_s"])
                    if base_local else float("nan"))
            overhead = r["step_ms"] / local["step_ms"] - 1
            print(f"{model:8} {n:5d} {r['samples_per_s']:10.0f} {r['step_ms']:8.1f} "
                  f"{100 * eff:9.0f}% {local['step_ms']:16.1f} {100 * leff:11.0f}% "
                  f"{100 * overhead:11.0f}%")
    top = max(args.ranks)
    print(f"\nbucket sweep at {top} ranks (hidden = share of all-reduce time inside backward):")
    print(f"{'model':8} {'config':17} {'buckets':>7} {'step_ms':>8} {'wait_ms':>8} {'comm_ms':>8} "
          f"{'hidden':>7} {'vs_one':>7} {'peak_MiB':>8}")
    for r in rows:
        if r["world_size"] != top or r["config"].startswith("none"):
            continue
        vs = r.get("saved_vs_one_bucket")
        vs_text = f"{100 * vs:6.0f}%" if vs is not None else "      -"
        print(f"{r['model']:8} {r['config']:17} {r['buckets']:7d} {r['step_ms']:8.1f} "
              f"{r['wait_ms']:8.1f} {r['comm_ms']:8.1f} {100 * r['hidden_share']:6.0f}% {vs_text} "
              f"{r.get('peak_mib', 0):8.1f}")


if __name__ == "__main__":
    main()
