#!/usr/bin/env python3
"""mgpu's CPU backend beside PyTorch's CPU build, side by side in one run: the training step
of lesson 01's MLP and CNN (bench_train and bench/train_torch.py), interleaved.

  bench/cpu_vs_torch.py                                  both models, batch 256, the cores
  bench/cpu_vs_torch.py --threads 1 --rounds 20
  bench/cpu_vs_torch.py --build-dir build-cpu --wait-policy active
  bench/cpu_vs_torch.py --spin-us 0                      mgpu's idle threads sleep at once
  bench/cpu_vs_torch.py --device cuda --precision bf16   the same on a GPU, forward under autocast

How it is fair:
- The same environment for both, set here and printed: OMP_NUM_THREADS and
  OPENBLAS_NUM_THREADS (= --threads, default the machine's cores), OMP_WAIT_POLICY
  (--wait-policy, PASSIVE by default: idle threads sleep instead of spinning, which on a
  shared machine takes cores from everyone else), OPENBLAS_CORETYPE (the kernels OpenBLAS
  picks on this machine, pinned so both use the same ones: PyTorch's Linear layers run on
  the same OpenBLAS). Each program also sets its threads through its own API (--threads).
- Waiting for work: OMP_WAIT_POLICY governs OpenMP's threads, on which PyTorch runs its
  own loops. Neither program's matrix products wait that way: PyTorch's Linear layers run on
  OpenBLAS's threads, which spin between products whatever the policy, and mgpu's pool (not
  OpenMP) spins MGPU_SPIN_US microseconds, 100 by default, and then sleeps. --spin-us 0
  makes mgpu's idle threads sleep at once, the closest it comes to PASSIVE.
- Interleaved: both programs are started once, build their models and warm up, then wait
  for requests (--serve). Each round runs --steps steps of mgpu, then of PyTorch (the order
  swaps every round: A B, B A, ...), so a change in the machine's load hits both alike.
- Medians with [min-max] over all measured steps, the ratio of the medians, and the median
  of the per-round ratios (each from two neighbouring turns). The load average is printed
  before and after. On a machine shared with other work, trust the ratios over the times.

PyTorch must be importable by --python (default: the first of this interpreter,
/usr/bin/python3 and python3 on PATH that imports torch; on Debian the python3-torch
package, which the system's /usr/bin/python3 sees and a pyenv or venv python may not).
"""
import argparse
import ctypes
import json
import os
import shutil
import statistics
import subprocess
import sys

from ddp_scaling import cpu_name  # the CPU's model name, from /proc/cpuinfo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def openblas_coretype():
    """The kernels OpenBLAS chooses on this machine (its DYNAMIC_ARCH detection), or None."""
    for name in ("libopenblas.so.0", "libopenblas.so"):
        try:
            lib = ctypes.CDLL(name)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            return lib.openblas_get_corename().decode()
        except (OSError, AttributeError):
            continue
    return None


def python_with_torch(requested):
    candidates = [requested] if requested else [sys.executable, "/usr/bin/python3", shutil.which("python3")]
    for exe in candidates:
        if exe and os.path.exists(exe) and subprocess.run(
                [exe, "-c", "import torch"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0:
            return exe
    sys.exit("cpu_vs_torch.py: no interpreter imports torch (tried " + ", ".join(c for c in candidates if c) +
             "); on Debian: apt-get install python3-torch and pass --python /usr/bin/python3")


class Server:
    """A contender started with --serve: steps on request, times back."""

    def __init__(self, label, cmd, env):
        self.label = label
        print("$ " + " ".join(cmd), flush=True)
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1)
        self.summary = ""
        for line in self.proc.stdout:  # the threading line, then "ready"
            line = line.strip()
            if line == "ready":
                return
            if line.startswith(label + ":"):
                self.summary = line[len(label) + 1:].strip()
        sys.exit(f"cpu_vs_torch.py: {label} ended before it was ready (exit status {self.proc.wait()})")

    def steps(self, model, batch, n):
        self.proc.stdin.write(f"step {model} {batch} {n}\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().split()
        if not answer or answer[0] != "ms":
            sys.exit(f"cpu_vs_torch.py: {self.label} answered {' '.join(answer)!r}")
        return [float(t) for t in answer[1:]]

    def close(self):
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        self.proc.wait()


def spread(times):
    return f"{statistics.median(times):.2f} [{min(times):.2f}-{max(times):.2f}]"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    p.add_argument("--python", help="interpreter that imports torch (default: found, see above)")
    p.add_argument("--models", nargs="+", default=["mlp", "cnn"], choices=["mlp", "cnn"])
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--wait-policy", choices=["passive", "active", "unset"], default="passive",
                   help="OMP_WAIT_POLICY for both (unset: each runtime's default)")
    p.add_argument("--spin-us", type=int,
                   help="MGPU_SPIN_US for mgpu's pool (default: the library's, 100; 0: sleep at once)")
    p.add_argument("--coretype", default="auto",
                   help="OPENBLAS_CORETYPE for both (auto: what OpenBLAS picks here)")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--steps", type=int, default=2, help="steps per contender per round")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--json", help="append one JSON line per model here")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda: where both train")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                   help="bf16: the forward under each one's autocast (amp::Autocast, torch.autocast)")
    args = p.parse_args()
    if args.threads < 1 or args.rounds < 1 or args.steps < 1:
        sys.exit("cpu_vs_torch.py: --threads, --rounds and --steps must be 1 or more")
    if args.spin_us is not None and not 0 <= args.spin_us <= 1000000:
        sys.exit("cpu_vs_torch.py: --spin-us takes 0 to 1000000 microseconds")

    bench_train = os.path.join(args.build_dir, "bench", "bench_train")
    if not os.path.exists(bench_train):
        sys.exit(f"cpu_vs_torch.py: {bench_train} not found: build it with "
                 f"`ninja -C {args.build_dir} bench/bench_train` (or pass --build-dir)")
    python = python_with_torch(args.python)
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(args.threads)
    env["OPENBLAS_NUM_THREADS"] = str(args.threads)
    if args.wait_policy == "unset":
        env.pop("OMP_WAIT_POLICY", None)
    else:
        env["OMP_WAIT_POLICY"] = args.wait_policy.upper()
    if args.spin_us is not None:
        env["MGPU_SPIN_US"] = str(args.spin_us)  # mgpu's pool only; PyTorch does not read it
    coretype = openblas_coretype() if args.coretype == "auto" else args.coretype
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    pinned = " ".join(f"{k}={env[k]}" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                "OMP_WAIT_POLICY", "OPENBLAS_CORETYPE", "MGPU_SPIN_US")
                      if k in env)

    load_before = os.getloadavg()
    common = ["--batch-size", str(args.batch_size), "--threads", str(args.threads),
              "--warmup", str(args.warmup), "--device", args.device,
              "--precision", args.precision]
    models = sum((["--model", m] for m in args.models), [])
    mgpu = Server("mgpu", [bench_train, "--serve"] + models + common, env)
    torch = Server("torch", [python, os.path.join(ROOT, "bench", "train_torch.py"), "--serve"] + models + common, env)
    times = {(who, m): [] for who in ("mgpu", "torch") for m in args.models}
    round_ratios = {m: [] for m in args.models}
    try:
        for r in range(args.rounds):
            for m in args.models:
                order = (mgpu, torch) if r % 2 == 0 else (torch, mgpu)
                turn = {s.label: s.steps(m, args.batch_size, args.steps) for s in order}
                for who, t in turn.items():
                    times[(who, m)] += t
                round_ratios[m].append(statistics.median(turn["torch"]) / statistics.median(turn["mgpu"]))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    finally:
        mgpu.close()
        torch.close()
    load_after = os.getloadavg()

    print(f"\nmachine: {cpu_name()}, {os.cpu_count()} cores; load average {load_before[0]:.2f} "
          f"{load_before[1]:.2f} {load_before[2]:.2f} before, {load_after[0]:.2f} {load_after[1]:.2f} "
          f"{load_after[2]:.2f} after")
    print(f"environment (both): {pinned}")
    print(f"mgpu:  {mgpu.summary}")
    print(f"torch: {torch.summary} (python {python})")
    print(f"training step of lesson 01's models on {args.device}, batch {args.batch_size}, "
          f"{args.precision}; {args.rounds} rounds of "
          f"{args.steps} steps each, interleaved; medians [min-max]")
    print(f"{'model':5} {'mgpu step_ms':>24} {'torch step_ms':>24} {'mgpu samples/s':>15} "
          f"{'torch samples/s':>16} {'ratio':>6} {'per-round ratio':>22}")
    for m in args.models:
        a, b = times[("mgpu", m)], times[("torch", m)]
        ratio = statistics.median(b) / statistics.median(a)
        rr = round_ratios[m]
        print(f"{m:5} {spread(a):>24} {spread(b):>24} {args.batch_size / statistics.median(a) * 1e3:15.0f} "
              f"{args.batch_size / statistics.median(b) * 1e3:16.0f} {ratio:6.2f} "
              f"{statistics.median(rr):6.2f} [{min(rr):.2f}-{max(rr):.2f}]")
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps({"model": m, "batch": args.batch_size, "threads": args.threads,
                                    "device": args.device, "precision": args.precision,
                                    "environment": pinned, "mgpu_ms": a, "torch_ms": b, "ratio": ratio,
                                    "round_ratios": rr, "load_before": load_before,
                                    "load_after": load_after}) + "\n")
    print("ratio = mgpu samples/s / PyTorch samples/s (above 1: mgpu is faster)")


if __name__ == "__main__":
    main()
