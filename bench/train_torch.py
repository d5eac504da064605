#!/usr/bin/env python3
"""PyTorch twin of bench_train and of lesson 01's `train`: the same MLP and CNN, the same
optimizer (SGD, momentum 0.9), the same batch sizes, and the same printed figures, so the
two can be compared side by side on one machine.

  python3 bench/train_torch.py                         # samples/s table, like bench_train
  python3 bench/train_torch.py --device cuda --batch-size 64 --batch-size 1024
  python3 bench/train_torch.py --train --model cnn     # train on Fashion-MNIST, like `train`

Without PyTorch it says so and exits 0 (a benchmark prints numbers; it does not fail).
"""
import argparse
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
    """The layers of lesson01::make_model (PyTorch's default initialisation is ours too)."""
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


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bench(args):
    devices = args.device or (["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} CPU threads; training step = "
          f"forward + cross-entropy + backward + SGD(lr {args.lr}, momentum {args.momentum}); "
          f"median of {args.reps} steps after {args.warmup} warm-up steps")
    print(f"{'model':<5} {'device':<28} {'batch':>7} {'step_ms':>10} {'samples/s':>12} {'GFLOP/s':>10}")
    for dev_name in devices:
        device = torch.device(dev_name)
        where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        for name in args.model or ["mlp", "cnn"]:
            for batch in args.batch_size or [256]:
                torch.manual_seed(0)
                model = make_model(name).to(device)
                opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
                loss_fn = nn.CrossEntropyLoss()
                x = torch.randn(batch, 1, 28, 28, device=device)
                y = (torch.arange(batch, device=device) % 10)
                times = []
                for i in range(args.warmup + args.reps):
                    sync(device)
                    t0 = time.perf_counter()
                    opt.zero_grad()
                    loss_fn(model(x), y).backward()
                    opt.step()
                    sync(device)
                    if i >= args.warmup:
                        times.append(time.perf_counter() - t0)
                ms = statistics.median(times) * 1e3
                sps = batch / (ms * 1e-3)
                print(f"{name:<5} {(dev_name + ' ' + where)[:28]:<28} {batch:>7} {ms:>10.2f} "
                      f"{sps:>12.0f} {3 * forward_flops(name) * sps * 1e-9:>10.1f}", flush=True)


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
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0: PyTorch's default)")
    p.add_argument("--train", action="store_true", help="train on Fashion-MNIST like lesson 01's train")
    p.add_argument("--data", default=FMNIST_DIR)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--schedule", choices=["cosine", "constant"], default="cosine")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    train(args) if args.train else bench(args)


if __name__ == "__main__":
    main()
