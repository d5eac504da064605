#!/usr/bin/env python3
"""What Python's global interpreter lock costs PyTorch's DataParallel threads, measured on
this machine (lesson 02, §6): the time of one call of a small module, and how the calls of
several threads add up when each thread runs its own copy of the module.

  bench/python_call_cost.py                    1, 2 and 4 threads, the default modules
  bench/python_call_cost.py --threads 1,2 --rounds 9 --calls 2000

A module on a [1, 8] input does almost no arithmetic, so its call time is the interpreter's
and the dispatcher's work: `__call__`, the module's `forward`, each op's argument parsing
(all holding the interpreter lock) and the op's bookkeeping in C++ (without it). Each
thread calls its own copy of the module, as DataParallel's replica threads do. If the lock
serialised everything, N threads would make no more calls per second than one; the speed-up
over one thread says what share of a call runs outside the lock.

The rounds are interleaved (1 thread, 2 threads, 4 threads, then again), with medians and
[min-max] over the rounds; the load average is printed before and after. Needs PyTorch
(Debian: python3-torch); exits 0 with a note without it.
"""
import argparse
import os
import statistics
import sys
import threading
import time


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", default="1,2,4", help="thread counts, comma-separated")
    p.add_argument("--rounds", type=int, default=7, help="interleaved rounds")
    p.add_argument("--calls", type=int, default=3000, help="module calls per thread per round")
    return p.parse_args()


def make_modules(torch):
    # One Linear, one ReLU, one BatchNorm1d in training mode: the layers of lesson 02's mlp-bn.
    return {
        "Linear(8, 8)": lambda: torch.nn.Linear(8, 8),
        "ReLU": lambda: torch.nn.ReLU(),
        "BatchNorm1d(8)": lambda: torch.nn.BatchNorm1d(8),
    }


def run_threads(n, make, calls, torch):
    """Wall seconds for n threads, each making `calls` calls of its own module."""
    copies = [make() for _ in range(n)]
    inputs = [torch.randn(2, 8, requires_grad=True) for _ in range(n)]
    start_line = threading.Barrier(n + 1)

    def work(i):
        m, x = copies[i], inputs[i]
        start_line.wait()
        for _ in range(calls):
            m(x)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    start_line.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def main():
    args = parse()
    try:
        import torch
    except ImportError:
        # Debian's python3-torch is seen by the system's interpreter, not by a venv's or pyenv's.
        system = "/usr/bin/python3"
        if os.path.realpath(sys.executable) != os.path.realpath(system) and os.access(system, os.X_OK):
            os.execv(system, [system, *sys.argv])
        print("python_call_cost: PyTorch is not importable (Debian: apt-get install python3-torch)")
        return 0
    torch.set_num_threads(1)  # one intra-op thread: the threads under test are ours
    counts = [int(c) for c in args.threads.split(",")]
    print(f"PyTorch {torch.__version__}, {os.cpu_count()} cores, intra-op threads 1, "
          f"load average {os.getloadavg()[0]:.2f}")
    for name, make in make_modules(torch).items():
        run_threads(1, make, 200, torch)  # warm up
        times = {n: [] for n in counts}
        for _ in range(args.rounds):
            for n in counts:
                times[n].append(run_threads(n, make, args.calls, torch))
        base = statistics.median(times[counts[0]]) / (args.calls * counts[0])
        print(f"\n{name}: one call")
        for n in counts:
            per_call = [t / (args.calls * n) * 1e6 for t in times[n]]  # wall us per call, all threads
            med = statistics.median(per_call)
            speedup = base * 1e6 / med
            print(f"  {n} thread(s): {med:6.2f} us of wall time per call "
                  f"[{min(per_call):.2f}-{max(per_call):.2f}], {1e6 / med:9.0f} calls/s, "
                  f"{speedup:.2f}x one thread's rate")
    print(f"\nload average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
