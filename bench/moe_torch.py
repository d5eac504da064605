#!/usr/bin/env python3
"""PyTorch twin of the MoE layer (mgpu::parallel::moe::MoE, one process): the same router
(f32 softmax, f64 for f64), top-k with renormalised weights and the balancing bias for the
selection only, capacity ceil(factor * N * k / E) with GShard's priority order, GPT-2 MLP
experts (GELU in its tanh form), the weighted combine and the Switch auxiliary loss, written
with torch ops and differentiated by autograd; its parameters, x and w read from the file
that build/bench/moe_export writes, its results compared with the library's.

  /usr/bin/python3 bench/moe_torch.py --check --export build/bench/moe_export
      the agreement test: the exporter runs five configurations (dropless k = 2, capacity
      1.0 with drops, k = 1, a bias, f32) and every check prints one line: the chosen
      experts, the slots (dropped choices) and the load per expert equal exactly; the
      weights, y, dx, every parameter's gradient (by kind, the worst expert) and the
      auxiliary loss within 1e-12 (f64) or 1e-5 (f32) of the largest magnitude of the
      library's tensor; the configurations with a capacity drop choices, the bias moves
      some. A table of the largest differences, then "N passed, M failed".
  /usr/bin/python3 bench/moe_torch.py --file moe.safetensors
      the same checks for one file of moe_export.

The reference is the library's tensor; a difference is max |ours - theirs| over the tensor
divided by max |theirs| (or, for a tensor of zeros, not divided). The twin does not cover a
token whose chosen probabilities are all 0 (the library gives it 1/k each).

It needs an interpreter that imports torch: on Debian that is /usr/bin/python3 with the
python3-torch package. Started by another python3 without torch, it runs itself again with
/usr/bin/python3 when that one has it; where none has PyTorch it says so and exits 77 (a
test skipped with the reason). The safetensors file is read here directly.
"""
import argparse
import math
import os
import re
import subprocess
import sys
import tempfile

from torch_twin import import_torch, read_safetensors  # noqa: E402

torch = import_torch("MOE_TORCH_REEXEC")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


# ---- the layer --------------------------------------------------------------------------------

class ExpertMLP(nn.Module):
    """GPT-2's MLP: fc1, GELU (tanh form), fc2, with biases."""

    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.gelu = nn.GELU(approximate="tanh")
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, rows):
        return self.fc2(self.gelu(self.fc1(rows)))


class MoE(nn.Module):
    """Parameters "router.weight" [E, M] and "experts.<e>.fc1.weight", ... as the library's."""

    def __init__(self, dim, hidden, experts, k, capacity_factor, aux_alpha, bias=None):
        super().__init__()
        self.router = nn.Linear(dim, experts, bias=False)
        self.experts = nn.ModuleList(ExpertMLP(dim, hidden) for _ in range(experts))
        self.k, self.capacity_factor, self.aux_alpha = k, capacity_factor, aux_alpha
        self.bias = torch.zeros(experts, dtype=torch.float64) if bias is None else bias

    def capacity(self, tokens):
        """Slots per expert, ceil(factor * N * k / E); -1 when dropless."""
        if self.capacity_factor <= 0:
            return -1
        return math.ceil(self.capacity_factor * float(tokens * self.k) / float(len(self.experts)))

    def slots(self, chosen, capacity):
        """Each choice's slot in its expert's buffer, -1 when dropped: every token's first
        choice in token order, then every second choice, ... (GShard), numbered by a
        cumulative sum of one-hot rows."""
        E = len(self.experts)
        slot = torch.empty_like(chosen)
        filled = torch.zeros(E, dtype=torch.int64)
        for j in range(chosen.shape[1]):
            onehot = F.one_hot(chosen[:, j], E)                   # [N, E]
            position = filled + onehot.cumsum(0) - 1               # its place if it chose e
            slot[:, j] = (position * onehot).sum(1)
            filled += onehot.sum(0)
        if capacity >= 0:
            slot[slot >= capacity] = -1
        return slot

    def forward(self, x):
        """y [N, M], the auxiliary loss, and the routing (chosen experts, slots, weights)."""
        N, E = x.shape[0], len(self.experts)
        # The router in f32 whatever x's dtype, f64 for f64.
        rd = torch.float64 if x.dtype == torch.float64 else torch.float32
        logits = F.linear(x.to(rd), self.router.weight.to(rd))
        probs = logits.softmax(dim=-1)
        # The k largest probs + bias, a tie to the lower index (a stable descending sort);
        # the bias moves the selection only.
        scores = probs.detach().to(torch.float64) + self.bias
        chosen = torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :self.k]
        # The chosen probs renormalised, p_j / sum_i p_i, written as the softmax of the chosen
        # logits (the same value: the full softmax's denominator cancels). Autograd through
        # the division would leave rounding where the gradient is exactly 0 (k = 1: w = 1).
        weight = logits.gather(1, chosen).softmax(dim=1)
        slot = self.slots(chosen, self.capacity(N))
        # Each expert on its kept rows; y[n] = sum_j weight[n, j] * expert_j(x[n]), a dropped
        # choice adding nothing (its weight not given to the others).
        kept = slot >= 0
        y = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            token, j = torch.nonzero((chosen == e) & kept, as_tuple=True)
            if token.numel() > 0:
                out = expert(x[token]) * weight[token, j].unsqueeze(1).to(x.dtype)
                y = y.index_add(0, token, out)
        aux = torch.zeros((), dtype=rd)
        if self.aux_alpha > 0:  # Switch: alpha * E * sum_e f_e * P_e, f a count (no gradient)
            f = torch.bincount(chosen.flatten(), minlength=E).to(rd) / (N * self.k)
            aux = self.aux_alpha * E * (f * probs.mean(dim=0)).sum()
        return y, aux, chosen, slot, weight


# ---- the exported step ----------------------------------------------------------------------



def relative(ours, theirs):
    """max |ours - theirs| / max |theirs| (not divided when theirs is all 0)."""
    diff = (ours.detach().double() - theirs.double()).abs().max().item()
    scale = theirs.double().abs().max().item()
    return diff / scale if scale > 0 else diff


def compare(path, name, threads):
    """The checks of one exported file: a list of (ok, line) and the largest differences."""
    torch.set_num_threads(threads)
    t, meta = read_safetensors(path)
    dtype = torch.float64 if meta["dtype"] == "f64" else torch.float32
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    bias = ([float(b) for b in meta["bias"].split(",")] if meta["bias"] else None)
    model = MoE(int(meta["dim"]), int(meta["hidden"]), int(meta["experts"]), int(meta["k"]),
                float(meta["capacity_factor"]), float(meta["aux_alpha"]),
                torch.tensor(bias, dtype=torch.float64) if bias else None).to(dtype)
    params = dict(model.named_parameters())
    model.load_state_dict({n: t[n] for n in params}, strict=True)
    x = t["x"].clone().requires_grad_(True)
    y, aux, chosen, slot, weight = model(x)
    ((y * t["w"]).sum() + aux).backward()

    results, worst = [], {}

    def exact(what, ok, detail):
        results.append((ok, f"{'ok    ' if ok else 'FAILED'}  {name}: {what} {detail}"))

    def close(what, ours, theirs):
        d = relative(ours, theirs)
        worst[what] = max(worst.get(what, 0.0), d)
        ok = d <= tol
        results.append((ok, f"{'ok    ' if ok else 'FAILED'}  {name}: {what} within {tol:g} "
                            f"(largest relative difference {d:.2e})"))

    N, k = chosen.shape
    exact("chosen experts equal", torch.equal(chosen, t["routing.expert"]),
          f"({N} tokens x {k})")
    dropped = int((slot < 0).sum())
    exact("slots and dropped choices equal", torch.equal(slot, t["routing.slot"]),
          f"(capacity {model.capacity(N)}: {dropped} dropped here, {meta['dropped']} by mgpu)")
    E = len(model.experts)
    load = torch.bincount(chosen.flatten(), minlength=E)
    kept = torch.bincount(chosen[slot >= 0], minlength=E)
    exact("load per expert equals the layer's statistics",
          torch.equal(load, t["stats.routed_per_expert"]) and torch.equal(kept, t["stats.tokens_per_expert"]),
          f"(routed {load.tolist()}, kept {kept.tolist()})")
    if bias:  # a bias that changes no choice would test nothing
        plain = torch.sort(model.router(x.detach()).softmax(dim=-1).double(), dim=1, descending=True,
                           stable=True).indices[:, :k]
        moved = int((plain != chosen).any(dim=1).sum())
        exact("the bias changes the choice of some tokens", moved > 0, f"({moved} of {N})")
    close("weights", weight, t["routing.weight"])
    close("y", y, t["y"])
    close("dx", x.grad, t["dx"])
    # Gradients by kind, the worst expert of each: grad.experts.*.fc1.weight, ...
    groups = {}
    for n, p in params.items():
        groups.setdefault(re.sub(r"\.\d+\.", ".*.", n), []).append(relative(p.grad, t["grad." + n]))
    for g, ds in groups.items():
        d = max(ds)
        worst["grads"] = max(worst.get("grads", 0.0), d)
        ok = d <= tol
        results.append((ok, f"{'ok    ' if ok else 'FAILED'}  {name}: grad {g} within {tol:g} "
                            f"(largest relative difference {d:.2e}, {len(ds)} tensor(s))"))
    if model.aux_alpha > 0:
        close("aux loss", aux.reshape(()), t["aux_loss"])
    return results, worst


# ---- the agreement test ---------------------------------------------------------------------

# (name, flags): M = 16, F = 32, E = 8, N = 64 unless a flag says otherwise.
CONFIGS = [
    ("dropless-k2", ["--k", "2", "--capacity-factor", "0", "--aux-alpha", "0.01", "--dtype", "f64"]),
    ("capacity1-k2", ["--k", "2", "--capacity-factor", "1.0", "--aux-alpha", "0.01", "--dtype", "f64"]),
    ("capacity1-k1", ["--k", "1", "--capacity-factor", "1.0", "--aux-alpha", "0.01", "--dtype", "f64"]),
    ("bias-k2", ["--k", "2", "--capacity-factor", "1.0", "--aux-alpha", "0",
                 "--bias", "0.02,-0.02,0.01,0,-0.01,0.03,-0.03,0", "--dtype", "f64"]),
    ("f32-k2", ["--k", "2", "--capacity-factor", "1.0", "--aux-alpha", "0.01", "--dtype", "f32"]),
]
COMMON = ["--dim", "16", "--hidden", "32", "--experts", "8", "--tokens", "64", "--seed", "1"]


def check(args):
    results, table = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name, flags in CONFIGS:
            path = os.path.join(tmp, name + ".safetensors")
            cmd = [args.export] + COMMON + flags + ["--out", path]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            print("mgpu: " + " ".join(cmd[1:]) + "\n      " + (r.stdout + r.stderr).strip(), flush=True)
            if r.returncode != 0:
                results.append((False, f"FAILED  {name}: moe_export exited {r.returncode}"))
                continue
            res, worst = compare(path, name, args.threads)
            if name != "dropless-k2":  # a capacity that drops nothing would test nothing
                _, meta = read_safetensors(path)
                ok = int(meta["dropped"]) > 0
                res.append((ok, f"{'ok    ' if ok else 'FAILED'}  {name}: the capacity drops choices "
                                f"({meta['dropped']} of {64 * int(flags[1])})"))
            for _, line in res:
                print(line, flush=True)
            results += res
            table.append((name, worst))
    print(f"\nlargest relative differences (mgpu against PyTorch {torch.__version__}, CPU):")
    cols = ["weights", "y", "dx", "grads", "aux loss"]
    print(f"{'configuration':14}" + "".join(f"{c:>10}" for c in cols))
    for name, worst in table:
        print(f"{name:14}" + "".join(f"{worst[c]:10.1e}" if c in worst else f"{'-':>10}" for c in cols))
    passed = sum(ok for ok, _ in results)
    failed = len(results) - passed
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 and passed > 0 else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="run --export on every configuration and compare")
    p.add_argument("--export", help="build/bench/moe_export (with --check)")
    p.add_argument("--file", help="compare one file that moe_export wrote")
    p.add_argument("--threads", type=int, default=1, help="PyTorch's CPU threads")
    args = p.parse_args()
    if args.check:
        if not args.export or not os.access(args.export, os.X_OK):
            sys.exit(f"moe_torch.py: --export {args.export}: not an executable "
                     "(build it: ninja -C build bench/moe_export)")
        return check(args)
    if not args.file:
        sys.exit("moe_torch.py: give --check --export PROGRAM, or --file FILE")
    results, _ = compare(args.file, os.path.basename(args.file), args.threads)
    for _, line in results:
        print(line)
    failed = sum(not ok for ok, _ in results)
    print(f"{len(results) - failed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
