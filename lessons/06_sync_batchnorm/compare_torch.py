#!/usr/bin/env python3
"""Compares SyncBatchNorm with PyTorch's BatchNorm on the concatenated batch.

Runs sync_bn_cases under mpirun (2 and 3 ranks by default): each rank holds its own rows
of a whole batch; the program writes the whole batch, dy, the layer's outputs gathered
from every rank, the running statistics and the summed gradients. This script feeds the
same whole batch and dy to torch.nn.BatchNorm1d/2d in one process (training mode, the
same weight, bias, eps and momentum) and prints, per case, the largest absolute
difference of y, dx, the running mean and variance, and grad_weight / grad_bias.

  python3 lessons/06_sync_batchnorm/compare_torch.py                  (the reference's steps)
  python3 lessons/06_sync_batchnorm/compare_torch.py \\
      --program build/lessons/06_sync_batchnorm/sync_bn_cases        (yours)

PyTorch comes from pip or from Debian (apt-get install python3-torch, for /usr/bin/python3).
Exit status: 0 when every difference is within the tolerance (1e-5 for f32, 1e-10 for
f64), 1 when one is not, 2 when something could not run (with the reason).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOLERANCE = {"f32": 1e-5, "f64": 1e-10}


def fail(message):
    print(f"compare_torch: {message}", file=sys.stderr)
    sys.exit(2)


def run_cases(program, ranks, out_path):
    cmd = [os.path.join(ROOT, "tools", "mpirun"), "-np", str(ranks), program, "--out", out_path]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        fail(f"{' '.join(cmd)} failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")
    with open(out_path) as f:
        return json.load(f)


def torch_reference(torch, case):
    dtype = {"f32": torch.float32, "f64": torch.float64}[case["dtype"]]
    shape = case["shape"]
    channels = shape[1]
    cls = torch.nn.BatchNorm2d if len(shape) == 4 else torch.nn.BatchNorm1d
    bn = cls(channels, eps=case["eps"], momentum=case["momentum"]).to(dtype)
    with torch.no_grad():
        bn.weight.copy_(torch.tensor(case["weight"], dtype=dtype))
        bn.bias.copy_(torch.tensor(case["bias"], dtype=dtype))
    bn.train()
    steps = []
    for step in case["steps"]:
        x = torch.tensor(step["x"], dtype=dtype).reshape(shape).requires_grad_(True)
        dy = torch.tensor(step["dy"], dtype=dtype).reshape(shape)
        y = bn(x)
        y.backward(dy)
        steps.append((y.detach().flatten(), x.grad.flatten()))
    return bn, steps


def largest(torch, ours, theirs):
    a = torch.tensor(ours, dtype=torch.float64).flatten()
    b = theirs.detach().to(torch.float64).flatten()
    if a.numel() != b.numel():
        return float("inf")
    return (a - b).abs().max().item() if a.numel() else 0.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--program", default=os.path.join(ROOT, "build", "solutions",
                                                          "06_sync_batchnorm", "sync_bn_cases"),
                        help="the sync_bn_cases binary (default: %(default)s): the reference's "
                             "steps; build/lessons/06_sync_batchnorm/sync_bn_cases runs yours")
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 3],
                        help="world sizes to run (default: 2 3)")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        fail(f"PyTorch is not importable from {sys.executable}: pip install torch, or "
             "apt-get install python3-torch and run this with /usr/bin/python3")
    if not os.access(args.program, os.X_OK):
        fail(f"{args.program} is not built: ninja -C build solutions-06_sync_batchnorm "
             "(or pass --program)")
    print(f"torch {torch.__version__}; SyncBatchNorm ({args.program}) vs torch.nn.BatchNorm on the "
          "concatenated batch; largest absolute differences")
    worst_ratio = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for ranks in args.ranks:
            data = run_cases(args.program, ranks, os.path.join(tmp, f"np{ranks}.json"))
            for case in data["cases"]:
                bn, steps = torch_reference(torch, case)
                diffs = {
                    "y": max(largest(torch, s["y"], t[0]) for s, t in zip(case["steps"], steps)),
                    "dx": max(largest(torch, s["dx"], t[1]) for s, t in zip(case["steps"], steps)),
                    "running_mean": largest(torch, case["running_mean"], bn.running_mean),
                    "running_var": largest(torch, case["running_var"], bn.running_var),
                    "grad_weight": largest(torch, case["grad_weight"], bn.weight.grad),
                    "grad_bias": largest(torch, case["grad_bias"], bn.bias.grad),
                }
                tracked_ok = case["num_batches_tracked"] == bn.num_batches_tracked.item()
                tol = TOLERANCE[case["dtype"]]
                # Gradients are sums over the whole batch: allow their size.
                n = case["shape"][0] * max(1, len(case["steps"]))
                ratio = max(max(v / (tol * (n if k.startswith("grad") else 1))
                                for k, v in diffs.items()), 0.0 if tracked_ok else float("inf"))
                worst_ratio = max(worst_ratio, ratio)
                cells = "  ".join(f"{k} {v:.1e}" for k, v in diffs.items())
                print(f"  np {ranks}  {case['name']:<36} counts {case['counts']}  {cells}"
                      f"{'' if tracked_ok else '  num_batches_tracked differs'}")
    ok = worst_ratio <= 1.0
    print(f"{'OK' if ok else 'FAILED'}: largest difference {worst_ratio:.2f} x the tolerance "
          "(1e-5 f32, 1e-10 f64; gradients times the number of summed rows)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
