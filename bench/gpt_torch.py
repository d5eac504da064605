#!/usr/bin/env python3
"""PyTorch twin of lesson 12's gpt-tiny: the same decoder (nanoGPT's layout and parameter
names, GELU in its tanh form, LayerNorm eps 1e-5, the head tied to the token embedding),
the same AdamW, the same initial weights and the same batches, read from the safetensors
file that lesson 12's `train --export` writes.

  /usr/bin/python3 bench/gpt_torch.py --check --train build/solutions/12_transformer/train
      the agreement test: train runs 20 fp32 steps on the CPU (--data synthetic) and exports
      its initial weights, batches, learning rates and losses; PyTorch replays them and
      every loss must agree within --tolerance (1e-4). Last line "N passed, M failed".
  /usr/bin/python3 bench/gpt_torch.py --train build/solutions/12_transformer/train \\
      --threads 2 --rounds 5 --steps 10
      tokens/s of both, interleaved in one run (mgpu, PyTorch, mgpu, PyTorch, ...) on the same
      threads and batch: each round runs --steps training steps of a fresh model on each
      side; medians with min and max, the ratio of the medians, and the load average.
  python3 bench/gpt_torch.py --train build-gpu/solutions/12_transformer/train --device cuda \
      --precision bf16      the same pair on the GPU (tools/gpu-check runs it), with each
      side's model FLOP utilisation (MFU) against the GPU's dense peak for the precision.

FLOPs are counted as PaLM's appendix does: 6 per weight of every matrix product per token
(the blocks' 12·L·C² and the tied head's V·C), plus 12·L·C·T per token for attention's two
batched products (the masked half counted too).

It needs an interpreter that imports torch: on Debian that is /usr/bin/python3 with the
python3-torch package. Started by another python3 without torch, it runs itself again with
/usr/bin/python3 when that one has it; where none has PyTorch it says so and exits 77 (a
test skipped with the reason). The safetensors file is read here directly (an 8-byte
header size, a JSON header, the raw little-endian data), so the `safetensors` package is
not needed.
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

from torch_twin import import_torch, read_safetensors  # noqa: E402

torch = import_torch("GPT_TORCH_REEXEC")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


# ---- the model ----------------------------------------------------------------------------

class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / (C // self.n_head) ** 0.5
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        probs = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (probs @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, eps=1e-5)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd, eps=1e-5)
        self.mlp = MLP(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """nanoGPT's GPT: parameter names "transformer.wte.weight", "transformer.h.0.attn.c_attn.weight",
    ...; lm_head shares the token table (one parameter, as ours)."""

    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            h=nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer)),
            ln_f=nn.LayerNorm(n_embd, eps=1e-5)))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight

    def forward(self, ids):
        T = ids.shape[1]
        x = self.transformer.wte(ids) + self.transformer.wpe(torch.arange(T, device=ids.device))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def gpt_tiny(vocab_size):
    """gpt-tiny's sizes (nn::GPTConfig::tiny)."""
    return GPT(vocab_size, block_size=128, n_layer=4, n_head=4, n_embd=128)


# ---- the exported run ----------------------------------------------------------------------



def replay(export_path, threads):
    """PyTorch's losses over the exported steps, from the exported weights and batches."""
    torch.set_num_threads(threads)
    tensors, meta = read_safetensors(export_path)
    sizes = {k: int(meta[k]) for k in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd")}
    model = GPT(**sizes)
    state = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    state["lm_head.weight"] = state["transformer.wte.weight"]
    model.load_state_dict(state, strict=True)
    beta1, beta2, eps, weight_decay = (float(x) for x in meta["adamw"].split())
    lrs, ours = tensors["lr"].tolist(), tensors["loss"].tolist()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lrs[0], betas=(beta1, beta2), eps=eps,
                                  weight_decay=weight_decay)
    theirs = []
    for k, lr in enumerate(lrs):
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = tensors[f"batch.{k}.inputs"], tensors[f"batch.{k}.targets"]
        optimizer.zero_grad(set_to_none=True)
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
        loss.backward()
        optimizer.step()
        theirs.append(loss.item())
    return ours, theirs


def check(args):
    """The agreement test: mgpu's and PyTorch's losses step by step."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "run.safetensors")
        cmd = [args.train, "--data", "synthetic", "--steps", str(args.steps), "--export", path,
               "--export-steps", str(args.steps), "--eval-every", "0", "--eval-batches", "1",
               "--batch-size", str(args.batch_size), "--seq", str(args.seq),
               "--threads", str(args.threads), "--precision", "fp32", "--device", "cpu"]
        print("mgpu: " + " ".join(cmd), flush=True)
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            print(r.stdout + r.stderr)
            print("0 passed, 1 failed (train did not finish)")
            return 1
        ours, theirs = replay(path, args.threads)
    worst = 0.0
    print(f"{'step':>4}  {'mgpu':>10}  {'PyTorch':>10}  {'|diff|':>9}")
    for k, (a, b) in enumerate(zip(ours, theirs)):
        worst = max(worst, abs(a - b))
        print(f"{k + 1:>4}  {a:10.6f}  {b:10.6f}  {abs(a - b):9.2e}")
    ok = len(ours) == args.steps and worst <= args.tolerance
    print(f"{'ok    ' if ok else 'FAILED'}  the first {len(ours)} losses of gpt-tiny agree with PyTorch's "
          f"within {args.tolerance:g} (fp32, CPU; largest difference {worst:.2e})")
    print(f"{1 if ok else 0} passed, {0 if ok else 1} failed")
    return 0 if ok else 1


# ---- tokens per second, interleaved ---------------------------------------------------------

def flops_per_token(vocab_size, seq, n_layer=4, n_embd=128):
    """A training step's FLOPs per token (see the file comment)."""
    return 6 * (12 * n_layer * n_embd ** 2 + vocab_size * n_embd) + 12 * n_layer * n_embd * seq


# Dense peak FLOP/s (no sparsity) of the GPUs tools/gpu-check runs on, by precision: fp32 on
# the CUDA cores (neither side's fp32 GEMMs use TF32), bf16 on the tensor cores.
PEAK = {"H100": {"fp32": 67e12, "bf16": 989e12}, "H200": {"fp32": 67e12, "bf16": 989e12}}


def peak_flops(device, precision):
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, peaks in PEAK.items():
        if key in name:
            return peaks[precision]
    return None


def torch_tokens_per_s(args, vocab_size):
    """One round of PyTorch: --warmup untimed steps of a fresh model, then --steps timed."""
    torch.manual_seed(0)
    device = torch.device(args.device)
    model = gpt_tiny(vocab_size).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99), eps=1e-8,
                                  weight_decay=0.0)
    g = torch.Generator().manual_seed(0)
    batches = [torch.randint(vocab_size, (args.batch_size, args.seq + 1), generator=g).to(device)
               for _ in range(args.warmup + args.steps)]
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    start = None
    for k, b in enumerate(batches):
        if k == args.warmup:
            sync()
            start = time.perf_counter()
        x, y = b[:, :-1], b[:, 1:]
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            logits = model(x)
        F.cross_entropy(logits.float().reshape(-1, vocab_size), y.reshape(-1)).backward()
        optimizer.step()
    sync()
    return args.batch_size * args.seq * args.steps / (time.perf_counter() - start)


def mgpu_tokens_per_s(args, env):
    """One round of mgpu: train runs --warmup + --steps steps; the time of the last --steps
    is the difference of the training time train reports (its metrics file: the mean step
    time so far, written at each evaluation) after the warm-up and at the end."""
    total = args.warmup + args.steps
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "metrics.jsonl")
        cmd = [args.train, "--data", "synthetic", "--steps", str(total),
               "--eval-every", str(args.warmup if args.warmup > 0 else total),
               "--eval-batches", "1", "--batch-size", str(args.batch_size), "--seq", str(args.seq),
               "--threads", str(args.threads), "--precision", args.precision, "--device", args.device,
               "--metrics", metrics]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
        if r.returncode != 0:
            sys.exit(f"gpt_torch.py: {' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
        with open(metrics, encoding="utf-8") as f:
            rows = {int(o["step"]): o for o in map(json.loads, filter(str.strip, f))}
    train_s = {k: o["step_ms"] * k / 1e3 for k, o in rows.items()}   # mean x steps
    if total not in train_s or (args.warmup > 0 and args.warmup not in train_s):
        sys.exit(f"gpt_torch.py: train's metrics lack step {args.warmup} or {total}: {sorted(rows)}")
    seconds = train_s[total] - (train_s[args.warmup] if args.warmup > 0 else 0.0)
    v = re.search(r"vocabulary (\d+)|(\d+) characters in the vocabulary", r.stdout)
    vocab = int(next(g for g in v.groups() if g)) if v else 33
    return args.batch_size * args.seq * args.steps / seconds, vocab


def load():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def bench(args):
    torch.set_num_threads(args.threads)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    device = torch.device(args.device)
    where = (torch.cuda.get_device_name(device) if device.type == "cuda"
             else f"CPU, {args.threads} thread(s) each")
    print(f"gpt-tiny (4 layers, 4 heads, C = 128), batch {args.batch_size} x {args.seq} tokens, "
          f"{args.precision}, {where}; {args.rounds} rounds of {args.warmup} untimed and "
          f"{args.steps} timed steps, mgpu and PyTorch {torch.__version__} interleaved")
    print(f"load average (1, 5, 15 min) before: {load()}", flush=True)
    ours, theirs = [], []
    vocab = 33
    for r in range(args.rounds):
        if args.torch_only:   # PyTorch alone, e.g. under a profiler (synthetic data: 33 ids)
            b = torch_tokens_per_s(args, vocab)
            theirs.append(b)
            print(f"round {r + 1}: PyTorch {b:8.0f} tokens/s", flush=True)
            continue
        a, vocab = mgpu_tokens_per_s(args, env)
        b = torch_tokens_per_s(args, vocab)
        ours.append(a)
        theirs.append(b)
        print(f"round {r + 1}: mgpu {a:8.0f} tokens/s   PyTorch {b:8.0f} tokens/s", flush=True)
    print(f"load average after: {load()}")
    if args.torch_only:
        m = statistics.median(theirs)
        print(f"PyTorch  median {m:8.0f} tokens/s, {1e3 * args.batch_size * args.seq / m:.3f} ms per step")
        return 0
    flops = flops_per_token(vocab, args.seq)
    peak = peak_flops(device, args.precision)
    for name, v in (("mgpu", ours), ("PyTorch", theirs)):
        m = statistics.median(v)
        mfu = f", MFU {100 * m * flops / peak:.1f}% of {peak / 1e12:.0f} TFLOP/s" if peak else ""
        print(f"{name:8} median {m:8.0f} tokens/s (min {min(v):.0f}, max {max(v):.0f}); "
              f"{m * flops / 1e9:.1f} GFLOP/s at {flops / 1e6:.2f} MFLOP per token{mfu}")
    print(f"mgpu / PyTorch: {statistics.median(ours) / statistics.median(theirs):.2f}x (medians)")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train", required=True, help="lesson 12's train program (build/solutions/12_transformer/train)")
    p.add_argument("--check", action="store_true", help="the agreement test instead of the benchmark")
    p.add_argument("--torch-only", action="store_true",
                   help="bench: PyTorch's side alone (to profile it; --train is still checked)")
    p.add_argument("--threads", type=int, default=2, help="CPU threads of each side")
    p.add_argument("--device", default="cpu", help="bench: cpu, cuda or cuda:N (--check: the CPU)")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                   help="bench: the GEMMs' dtype (bf16: train --precision bf16, torch.autocast)")
    p.add_argument("--steps", type=int, default=None, help="steps (check: 20; bench: 10 per round)")
    p.add_argument("--rounds", type=int, default=5, help="bench rounds, each mgpu then PyTorch")
    p.add_argument("--warmup", type=int, default=None,
                   help="bench: untimed steps of each round first (default: 0 on the CPU, 5 on "
                        "a GPU, where the first steps load kernels and create library handles)")
    p.add_argument("--batch-size", type=int, default=None, help="sequences per step (check: 8; bench: 32)")
    p.add_argument("--seq", type=int, default=None, help="tokens per sequence (check: 64; bench: 128)")
    p.add_argument("--tolerance", type=float, default=1e-4, help="largest loss difference allowed")
    args = p.parse_args()
    if args.steps is None:
        args.steps = 20 if args.check else 10
    if args.batch_size is None:
        args.batch_size = 8 if args.check else 32
    if args.seq is None:
        args.seq = 64 if args.check else 128
    if args.warmup is None:
        args.warmup = 0 if args.device == "cpu" else 5
    if args.warmup < 0:
        sys.exit("gpt_torch.py: --warmup must be 0 or more")
    if min(args.threads, args.steps, args.rounds, args.batch_size) < 1 or not 1 <= args.seq <= 128:
        sys.exit("gpt_torch.py: --threads, --steps, --rounds and --batch-size must be 1 or more, "
                 "--seq 1 to 128")
    if args.device != "cpu" and not args.device.startswith("cuda"):
        sys.exit(f"gpt_torch.py: --device {args.device}: cpu, cuda or cuda:N")
    if args.device != "cpu" and not torch.cuda.is_available():
        print(f"SKIPPED: --device {args.device}, but this PyTorch sees no GPU")
        sys.exit(77)
    if not os.access(args.train, os.X_OK):
        sys.exit(f"gpt_torch.py: {args.train} is not an executable (build it: "
                 "ninja -C build solutions/12_transformer/train)")
    return check(args) if args.check else bench(args)


if __name__ == "__main__":
    sys.exit(main())
