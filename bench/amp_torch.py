#!/usr/bin/env python3
"""PyTorch twin of bench_amp's step table: the same models (lesson 01's MLP and CNN and the
large MLP), the same step (forward, cross-entropy, backward, SGD with momentum 0.9), in fp32,
under torch.autocast(dtype=bfloat16), and under torch.autocast(dtype=float16) with
torch.amp.GradScaler; contenders take turns, medians with min and max, the load average
before and after. Run it on the same machine right after build/bench/bench_amp.

  python3 bench/amp_torch.py                      # cuda when available, else cpu
  python3 bench/amp_torch.py --device cpu --reps 5 --width 1024

Without PyTorch it says so and exits 0 (a benchmark prints numbers; it does not fail).
"""
import argparse
import os
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
except ImportError:
    print("amp_torch.py: PyTorch is not importable here (pip install torch); nothing to compare")
    sys.exit(0)


def make_model(name, width):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(),
                             nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    if name == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 32, 3, 1, 1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, 1, 1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))
    return nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))


def load(when):
    try:
        a, b, c = os.getloadavg()
        print(f"load average {when}: {a:.2f} {b:.2f} {c:.2f}")
    except OSError:
        pass


def timed(device, fn):
    """Milliseconds of fn(): CUDA events on the GPU's clock, the wall clock on the CPU."""
    if device.type == "cuda":
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop)
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--width", type=int, default=0, help="large MLP width and batch "
                    "(default 8192 on a GPU, 1024 on the CPU)")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()
    device = torch.device(args.device)
    width = args.width or (8192 if device.type == "cuda" else 1024)
    # Matmuls in true fp32, as mgpu's (PyTorch's default; TF32 would be a fourth contender).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{torch.get_num_threads()} CPU threads"
    print(f"amp_torch.py: PyTorch {torch.__version__} on {name}; median of {args.reps} runs "
          f"after {args.warmup} warm-up runs")
    load("before")
    print("training step (forward, loss, backward, SGD momentum 0.9): ms [min, max]")
    print(f"{'model':<5} {'batch':>6} {'fp32':>24} {'bf16 autocast':>24} {'fp16 + GradScaler':>24}"
          f" {'bf16 x':>8} {'fp16 x':>8}")
    for model_name in ("mlp", "cnn", "large"):
        batch = width if model_name == "large" else args.batch_size
        shape = (batch, width) if model_name == "large" else (batch, 1, 28, 28)
        x = torch.rand(shape, device=device) * 2 - 1
        y = torch.full((batch,), 3, dtype=torch.long, device=device)
        runs = []
        for dtype, scaled in ((None, False), (torch.bfloat16, False), (torch.float16, True)):
            torch.manual_seed(1)
            model = make_model(model_name, width).to(device)
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
            if hasattr(torch.amp, "GradScaler"):  # PyTorch >= 2.3
                scaler = torch.amp.GradScaler(device.type, enabled=scaled)
            else:
                scaler = torch.cuda.amp.GradScaler(enabled=scaled and device.type == "cuda")
            runs.append((model, opt, scaler, dtype))

        def step(run):
            model, opt, scaler, dtype = run
            opt.zero_grad(set_to_none=False)
            with torch.autocast(device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
                loss = nn.functional.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()

        # Older PyTorch has no fp16 autocast on the CPU: that contender is then left out.
        usable = []
        for r in runs:
            try:
                for _ in range(max(1, args.warmup)):
                    step(r)
                usable.append(r)
            except RuntimeError as e:
                usable.append(None)
                print(f"  ({model_name}: {r[3]} left out: {str(e).splitlines()[0]})")
        times = [[] for _ in runs]
        for _ in range(args.reps):
            for i, r in enumerate(usable):
                if r is not None:
                    times[i].append(timed(device, lambda: step(r)))
        med = [statistics.median(t) if t else float("nan") for t in times]
        cells = " ".join(f"{m:9.3f} [{min(t):6.3f}, {max(t):6.3f}]" if t else f"{'n/a':>24}"
                         for m, t in zip(med, times))
        ratios = " ".join(f"{med[0] / m:7.2f}x" if times[0] and t else f"{'n/a':>8}"
                          for m, t in zip(med[1:], times[1:]))
        print(f"{model_name:<5} {batch:>6} {cells} {ratios}")
    load("after")


if __name__ == "__main__":
    main()
