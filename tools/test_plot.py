#!/usr/bin/env python3
"""Self-test of tools/plot: every kind of plot from small made-up inputs gives a PNG, and
bad input gives a one-line error naming the file and what is wrong. Exit 77 (skip) where
matplotlib is not installed."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

PLOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plot")
PHASES = ["data_wait", "h2d", "forward", "backward", "exposed_comm", "optimizer", "other"]


def have_matplotlib():
    for py in (sys.executable, "/usr/bin/python3"):
        if os.path.exists(py) and subprocess.run([py, "-c", "import matplotlib"],
                                                 capture_output=True).returncode == 0:
            return True
    return False


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


class PlotTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)

    def plot(self, *args):
        return subprocess.run([sys.executable, PLOT] + list(args), capture_output=True, text=True)

    def assert_png(self, r, out):
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        self.assertGreater(os.path.getsize(out), 2000)  # more than an empty canvas

    def assert_error(self, r, *words):
        self.assertNotEqual(r.returncode, 0)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        for w in words:
            self.assertIn(w, lines[0])

    def test_curves(self):
        rows = [{"epoch": e, "train_loss": 1 / e, "test_loss": 1.1 / e, "train_acc": 1 - 0.5 / e,
                 "test_acc": 1 - 0.6 / e} for e in range(1, 6)]
        write_jsonl(self.path("a.jsonl"), rows)
        write_jsonl(self.path("b.jsonl"), rows[:3])
        out = self.path("curves.png")
        self.assert_png(self.plot("curves", self.path("a.jsonl"), self.path("b.jsonl"), "-o", out,
                                  "--labels", "1 rank,2 ranks"), out)

    def test_breakdown_from_sweep(self):
        rows = [{"label": f"{c} MiB", "x": c, "step_ms": 100 + c,
                 "phases_ms": dict(zip(PHASES, [1, 2, 30, 60, c, 3, 4])),
                 "predicted_step_ms": 98 + c} for c in (1, 5, 25)]
        write_jsonl(self.path("sweep.jsonl"), rows)
        out = self.path("breakdown.png")
        self.assert_png(self.plot("breakdown", self.path("sweep.jsonl"), "-o", out), out)
        out2 = self.path("sweep.png")
        self.assert_png(self.plot("sweep", self.path("sweep.jsonl"), "--y", "step_ms,exposed_comm",
                                  "-o", out2), out2)

    def trace(self):
        events = [{"name": "process_name", "ph": "M", "pid": r, "args": {"name": f"rank {r}"}}
                  for r in (0, 1)]
        for r in (0, 1):
            t = 0
            for step in range(3):
                for name, dur in (("data wait", 500), ("forward", 3000), ("backward", 6000),
                                  ("wait for buckets", 800), ("optimizer", 400)):
                    events.append({"name": name, "ph": "X", "pid": r, "tid": "compute",
                                   "ts": t, "dur": dur})
                    t += dur
                events.append({"name": "all-reduce bucket 0", "ph": "X", "pid": r, "tid": "comm",
                               "ts": t - 4000, "dur": 2500})
        path = self.path("trace.json")
        with open(path, "w") as f:
            json.dump({"traceEvents": events}, f)
        return path

    def test_timeline_and_breakdown_from_trace(self):
        trace = self.trace()
        out = self.path("timeline.png")
        self.assert_png(self.plot("timeline", trace, "-o", out, "--end-ms", "20"), out)
        out2 = self.path("bd.png")
        self.assert_png(self.plot("breakdown", trace, "-o", out2), out2)

    def test_phase_of_a_span_name(self):
        import importlib.machinery
        import importlib.util
        loader = importlib.machinery.SourceFileLoader("plot", PLOT)
        plot = importlib.util.module_from_spec(importlib.util.spec_from_loader("plot", loader))
        loader.exec_module(plot)
        self.assertEqual(plot.phase_of("forward"), "forward")
        self.assertEqual(plot.phase_of("forward (buckets rebuilt)"), "forward")
        self.assertEqual(plot.phase_of("all-reduce bucket 3"), "exposed_comm")
        self.assertEqual(plot.phase_of("wait for bucket 0"), "exposed_comm")
        self.assertEqual(plot.phase_of("data wait"), "data_wait")
        self.assertEqual(plot.phase_of("evaluate"), "other")

    def test_scaling(self):
        rows = []
        for mode in ("weak", "strong"):
            for n in (1, 2, 3, 4):
                eff = 1.0 if n == 1 else 0.8 / (n - 1) ** 0.3
                rows.append({"mode": mode, "world_size": n, "samples_per_s": 100 * n * eff,
                             "efficiency": eff, "predicted_efficiency": eff * 1.05,
                             "predicted_samples_per_s": 105 * n * eff})
        write_jsonl(self.path("scaling.jsonl"), rows)
        out = self.path("scaling.png")
        self.assert_png(self.plot("scaling", self.path("scaling.jsonl"), "-o", out), out)

    def test_memory(self):
        rows = []
        for model in ("cnn", "wide-mlp"):
            for label, per_param in (("DDP", 16.0), ("ZeRO-3", None)):
                for n in (1, 2, 3, 4):
                    want = 10 * (per_param if per_param else 16.0 / n)
                    rows.append({"model": model, "label": label, "world_size": n,
                                 "measured_MiB": want * 1.01, "predicted_MiB": want})
        write_jsonl(self.path("memory.jsonl"), rows)
        out = self.path("memory.png")
        self.assert_png(self.plot("memory", self.path("memory.jsonl"), "-o", out), out)
        write_jsonl(self.path("m2.jsonl"), [{"label": "DDP", "world_size": 1, "measured_MiB": 1}])
        self.assert_error(self.plot("memory", self.path("m2.jsonl"), "-o", self.path("x.png")),
                          "m2.jsonl", "predicted_MiB")

    def test_load(self):
        for name, skew in (("aux", 0.2), ("none", 0.9)):
            write_jsonl(self.path(f"{name}.jsonl"),
                        [{"step": s, "max_over_mean": [1 + skew / (1 + s), 1 + skew],
                          "dropped": int(100 * skew)} for s in range(20)])
        out = self.path("load.png")
        self.assert_png(self.plot("load", self.path("aux.jsonl"), self.path("none.jsonl"),
                                  "--labels", "aux,none", "-o", out), out)
        write_jsonl(self.path("l2.jsonl"), [{"step": 0, "dropped": 3}])
        self.assert_error(self.plot("load", self.path("l2.jsonl"), "-o", self.path("x.png")),
                          "l2.jsonl", "max_over_mean")

    def test_errors_are_one_line(self):
        write_jsonl(self.path("m.jsonl"), [{"epoch": 1, "train_loss": 1.0}])
        self.assert_error(self.plot("curves", self.path("m.jsonl"), "-o", self.path("x.png")),
                          "m.jsonl", "test_acc")
        self.assert_error(self.plot("curves", self.path("missing.jsonl"), "-o", self.path("x.png")),
                          "missing.jsonl")
        self.assert_error(self.plot("curves", self.path("m.jsonl"), "-o", self.path("x.pdf")),
                          "png")
        write_jsonl(self.path("s.jsonl"), [{"label": "a", "phases_ms": {"fwd": 1}}])
        self.assert_error(self.plot("breakdown", self.path("s.jsonl"), "-o", self.path("x.png")),
                          "fwd", "forward")
        with open(self.path("bad.json"), "w") as f:
            f.write("{not json")
        self.assert_error(self.plot("timeline", self.path("bad.json"), "-o", self.path("x.png")),
                          "bad.json")


if __name__ == "__main__":
    if not have_matplotlib():
        print("test_plot: SKIP: matplotlib is not installed (apt-get install python3-matplotlib)")
        sys.exit(77)
    unittest.main()
