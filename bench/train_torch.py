#!/usr/bin/env python3
"""PyTorch twin of bench_train and of lesson 01's `train`: the same MLP and CNN, the same
optimizer (SGD, momentum 0.9), the same batch sizes, and the same printed figures, so the
two can be compared side by side on one machine.

  /usr/bin/python3 bench/train_torch.py                # samples/s table, like bench_train
  /usr/bin/python3 bench/train_torch.py --device cuda --batch-size 64 --batch-size 1024
  /usr/bin/python3 bench/train_torch.py --train --model cnn   # train on Fashion-MNIST, like `train`
  python3 bench/train_torch.py --device cuda --precision bf16    # forward under torch.autocast(bf16)

It needs an interpreter that imports torch: on Debian that is /usr/bin/python3 with the
python3-torch package (a python3 of pyenv or a venv earlier on PATH may not have it).
Without PyTorch it says so and exits 0 (a benchmark prints numbers; it does not fail).

--threads N (default: the machine's cores, as bench_train) sets PyTorch's threads and those
of the OpenBLAS it calls for Linear layers, the way bench_train sets its pool's and
OpenBLAS's: torch.set_num_threads leaves OpenBLAS's own pool as it found it. --serve is
bench_train's protocol for bench/cpu_vs_torch.py (stdin "step MODEL BATCH N" answers
"ms T1 ... TN"; "quit" ends).
"""
import argparse
import ctypes
import gzip
import math
import os
import statistics
import struct
import sys
import time

try:
    import torch
    import torch.nn as nn
except ImportError:
    print("train_torch.py: PyTorch is not importable here (pip install torch); nothing to compare")
    sys.exit(0)

FMNIST_DIR = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530  # the training set's, as in mgpu::data::FashionMNIST


def make_model(name):
    """The layers of nn::make_model (PyTorch's default initialisation is ours too)."""
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(),
                             nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, 1, 1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, 1, 1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))


def forward_flops(name):
    """Matrix-product FLOPs of one sample's forward (2 per multiply-add), as bench_train."""
    if name == "mlp":
        return 2.0 * (784 * 256 + 256 * 128 + 128 * 10)
    return 2.0 * (28 * 28 * 9 * 32 + 14 * 14 * 288 * 64 + 3136 * 128 + 128 * 10)


def step_flops(name):
    """A training step's FLOPs per sample, as bench_train: the forward's, the weight gradients'
    (as many), the input gradients' (as many, but for the first layer's: the batch needs none)."""
    first_layer = 2.0 * 784 * 256 if name == "mlp" else 2.0 * 28 * 28 * 9 * 32
    return 3 * forward_flops(name) - first_layer


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def openblas():
    """The OpenBLAS library PyTorch calls for its matrix products, or None."""
    for name in ("libopenblas.so.0", "libopenblas.so"):
        try:
            lib = ctypes.CDLL(name)
            lib.openblas_get_num_threads  # raises AttributeError for another library
            return lib
        except (OSError, AttributeError):
            continue
    return None


def set_threads(n):
    """PyTorch's threads (OpenMP) and OpenBLAS's pool: the same count, as bench_train."""
    torch.set_num_threads(n)
    lib = openblas()
    if lib is not None:
        lib.openblas_set_num_threads(n)


def threading_summary():
    """The line bench_train prints as 'CPU:' (mgpu::cpu_threading_summary), for PyTorch."""
    n = torch.get_num_threads()
    text = (f"{n} thread{'s' if n != 1 else ''} ({torch.__config__.parallel_info().splitlines()[-1].split(':')[-1].strip()}); "
            f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}")
    lib = openblas()
    if lib is None:
        return text + "; BLAS: not OpenBLAS"
    lib.openblas_get_config.restype = ctypes.c_char_p
    lib.openblas_get_corename.restype = ctypes.c_char_p
    config = lib.openblas_get_config().decode().split()
    return (text + f"; {' '.join(config[:2])}, {lib.openblas_get_corename().decode()} kernels, "
            f"{lib.openblas_get_num_threads()} threads")


class Contender:
    """One model in training, with its optimizer and a fixed random batch (bench_train's)."""

    def __init__(self, name, batch, device, args):
        torch.manual_seed(0)
        self.device = device
        self.model = make_model(name).to(device)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=args.lr, momentum=args.momentum)
        self.loss_fn = nn.CrossEntropyLoss()
        self.x = torch.randn(batch, 1, 28, 28, device=device)
        self.y = torch.arange(batch, device=device) % 10
        self.bf16 = args.precision == "bf16"  # bench_train --precision bf16: amp::Autocast

    def step(self):
        self.opt.zero_grad()
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            logits = self.model(self.x)
        self.loss_fn(logits.float(), self.y).backward()
        self.opt.step()

    def timed_step(self):
        """Milliseconds of one step (wall clock, the device synchronized on both ends)."""
        sync(self.device)
        t0 = time.perf_counter()
        self.step()
        sync(self.device)
        return (time.perf_counter() - t0) * 1e3


def serve(args):
    """bench_train --serve's protocol: build and warm up, then steps on request."""
    device = torch.device((args.device or ["cpu"])[0])
    contenders = {}
    for name in args.model or ["mlp", "cnn"]:
        for batch in args.batch_size or [256]:
            c = Contender(name, batch, device, args)
            for _ in range(args.warmup):
                c.step()
            contenders[f"{name} {batch}"] = c
    print(f"torch: PyTorch {torch.__version__}, {threading_summary()}")
    print("ready", flush=True)
    for line in sys.stdin:
        words = line.split()
        if words[:1] == ["quit"]:
            break
        key = " ".join(words[1:3])
        if len(words) != 4 or words[0] != "step" or key not in contenders or int(words[3]) < 1:
            print(f"error: expected 'step MODEL BATCH N' for a model and batch given at start, got '{line.strip()}'",
                  flush=True)
            continue
        times = [contenders[key].timed_step() for _ in range(int(words[3]))]
        print("ms " + " ".join(f"{t:.4f}" for t in times), flush=True)


def bench(args):
    devices = args.device or (["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    print(f"PyTorch {torch.__version__}; training step = forward + cross-entropy + backward + "
          f"SGD(lr {args.lr}, momentum {args.momentum}), {args.precision}; median [min-max] of {args.reps} steps "
          f"after {args.warmup} warm-up steps")
    print(f"CPU: {threading_summary()}; load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"{'model':<5} {'device':<28} {'batch':>7} {'step_ms':>24} {'samples/s':>12} {'GFLOP/s':>10}")
    for dev_name in devices:
        device = torch.device(dev_name)
        where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        for name in args.model or ["mlp", "cnn"]:
            for batch in args.batch_size or [256]:
                c = Contender(name, batch, device, args)
                for _ in range(args.warmup):
                    c.step()
                times = [c.timed_step() for _ in range(args.reps)]
                ms = statistics.median(times)
                sps = batch / (ms * 1e-3)
                step_text = f"{ms:.2f} [{min(times):.2f}-{max(times):.2f}]"
                print(f"{name:<5} {(dev_name + ' ' + where)[:28]:<28} {batch:>7} {step_text:>24} "
                      f"{sps:>12.0f} {step_flops(name) * sps * 1e-9:>10.1f}", flush=True)
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


def read_idx(path):
    with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as f:
        raw = f.read()
    zero, kind, ndims = struct.unpack(">HBB", raw[:4])
    assert zero == 0 and kind == 0x08, f"{path}: not an unsigned-byte IDX file"
    dims = struct.unpack(">" + "I" * ndims, raw[4:4 + 4 * ndims])
    return torch.frombuffer(bytearray(raw[4 + 4 * ndims:]), dtype=torch.uint8).reshape(dims)


def load_split(folder, prefix):
    def find(name):
        for candidate in (name, name + ".gz"):
            if os.path.exists(os.path.join(folder, candidate)):
                return os.path.join(folder, candidate)
        sys.exit(f"error: {name}[.gz] not found in {folder}; install it with "
                 "`sudo apt-get install dataset-fashion-mnist` or pass --data DIR")
    images = read_idx(find(f"{prefix}-images-idx3-ubyte")).float().div_(255).sub_(MEAN).div_(STD)
    labels = read_idx(find(f"{prefix}-labels-idx1-ubyte")).long()
    return images.unsqueeze(1), labels


def train(args):
    """Lesson 01's `train` in PyTorch: same defaults, same per-epoch and final lines."""
    device = torch.device((args.device or ["cpu"])[0])
    name = (args.model or ["mlp"])[0]
    batch = (args.batch_size or [64])[0]
    x_train, y_train = load_split(args.data, "train")
    x_test, y_test = load_split(args.data, "t10k")
    x_test, y_test = x_test.to(device), y_test.to(device)
    torch.manual_seed(args.seed)
    model = make_model(name).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    loss_fn = nn.CrossEntropyLoss()
    start, train_time, seen_total = time.perf_counter(), 0.0, 0
    for epoch in range(args.epochs):
        # The same per-epoch learning rate as `train --schedule`.
        lr = args.lr * 0.5 * (1 + math.cos(math.pi * epoch / args.epochs)) \
            if args.schedule == "cosine" else args.lr
        for group in opt.param_groups:
            group["lr"] = lr
        model.train()
        g = torch.Generator().manual_seed(args.seed + epoch)
        order = torch.randperm(len(y_train), generator=g)
        t0 = time.perf_counter()
        loss_sum, correct, seen, steps = 0.0, 0, 0, 0
        for b in range(0, len(order), batch):
            idx = order[b:b + batch]
            x, y = x_train[idx].to(device, non_blocking=True), y_train[idx].to(device)
            opt.zero_grad()
            logits = model(x)
            loss = loss_fn(logits, y)
            loss.backward()
            opt.step()
            loss_sum += loss.item() * len(idx)
            correct += (logits.argmax(1) == y).sum().item()
            seen += len(idx)
            steps += 1
        sync(device)
        dt = time.perf_counter() - t0
        train_time += dt
        seen_total += seen
        model.eval()
        with torch.no_grad():
            test_loss, test_correct = 0.0, 0
            for b in range(0, len(y_test), 1000):
                logits = model(x_test[b:b + 1000])
                test_loss += loss_fn(logits, y_test[b:b + 1000]).item() * len(logits)
                test_correct += (logits.argmax(1) == y_test[b:b + 1000]).sum().item()
        test_acc = test_correct / len(y_test)
        print(f"epoch {epoch + 1}/{args.epochs}: lr={lr:.4g} train_loss={loss_sum / seen:.4f} "
              f"train_acc={correct / seen:.4f} test_loss={test_loss / len(y_test):.4f} "
              f"test_acc={test_acc:.4f} samples_per_s={seen / dt:.0f} "
              f"step_ms={1e3 * dt / steps:.2f} time_s={time.perf_counter() - start:.1f}", flush=True)
    print(f"final: test_acc={test_acc:.4f} train_loss={loss_sum / seen:.4f} "
          f"samples_per_s={seen_total / train_time:.0f} time_s={time.perf_counter() - start:.1f}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", action="append", help="cpu, cuda, cuda:1 (repeatable)")
    p.add_argument("--model", action="append", choices=["mlp", "cnn"], help="repeatable")
    p.add_argument("--batch-size", action="append", type=int, help="repeatable (bench default 256, train 64)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="CPU threads of PyTorch and of OpenBLAS (default: the cores, as bench_train)")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                   help="bench and --serve: bf16 runs the forward under torch.autocast(bfloat16)")
    p.add_argument("--train", action="store_true", help="train on Fashion-MNIST like lesson 01's train")
    p.add_argument("--serve", action="store_true", help="bench_train's --serve protocol (bench/cpu_vs_torch.py)")
    p.add_argument("--data", default=FMNIST_DIR)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--schedule", choices=["cosine", "constant"], default="cosine")
    args = p.parse_args()
    if args.threads < 1:
        sys.exit(f"error: --threads {args.threads}: give 1 or more")
    set_threads(args.threads)
    if args.serve:
        serve(args)
    elif args.train:
        train(args)
    else:
        bench(args)


if __name__ == "__main__":
    main()
