#!/usr/bin/env python3
"""Self-test of tools/hint: every task of every lesson has hints (a section in its lesson's
hints.md with at least two, the first a nudge, the last nearly the answer), and the command
shows them one at a time, keeps count, shows the last again and starts over.

Run: python3 tools/test_hint.py   (CI runs it with the other tools' self-tests)
"""
import contextlib
import importlib.machinery
import importlib.util
import io
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


sys.path.insert(0, HERE)
from grading import building  # noqa: E402


def load_hint():
    loader = importlib.machinery.SourceFileLoader("hint_tool", os.path.join(HERE, "hint"))
    spec = importlib.util.spec_from_loader("hint_tool", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


hint = load_hint()


def tasks_of(lesson):
    """The tasks whose fences the lesson's reference holds (check_fences' parser)."""
    tasks = set()
    folder = os.path.join(ROOT, "solutions", lesson)
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if os.path.isfile(path) and not os.path.islink(path):
            tasks |= {int(task[4:]) for task, _, _ in building.fences_of(path)}
    return tasks


class Hints(unittest.TestCase):
    def run_hint(self, *args):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = hint.main(list(args))
        return rc, out.getvalue()

    def test_every_task_of_every_lesson_has_graded_hints(self):
        for lesson in hint.lessons():
            with self.subTest(lesson=lesson):
                path = os.path.join(ROOT, "lessons", lesson, "hints.md")
                self.assertTrue(os.path.exists(path), f"{path} is missing")
                hints = hint.parse(path)
                for task in sorted(tasks_of(lesson)):
                    self.assertIn(task, hints, f"{lesson}: no hints for task {task}")
                    self.assertGreaterEqual(len(hints[task]), 2, f"{lesson} task {task}: one hint")
                    for h in hints[task]:
                        self.assertTrue(h.strip(), f"{lesson} task {task}: an empty hint")
                self.assertFalse(set(hints) - tasks_of(lesson),
                                 f"{lesson}: hints for tasks it does not have")

    def test_one_at_a_time_again_and_reset(self):
        with tempfile.TemporaryDirectory() as tmp:
            old = hint.STATE
            hint.STATE = os.path.join(tmp, "seen.json")
            try:
                _, first = self.run_hint("14", "2")
                self.assertIn("hint 1 of", first)
                _, second = self.run_hint("14", "2")
                self.assertIn("hint 2 of", second)
                _, again = self.run_hint("14", "2", "--again")
                self.assertIn("hint 2 of", again)
                _, listing = self.run_hint("14")
                self.assertIn("task 2: 2 of", listing)
                n = len(hint.parse(os.path.join(ROOT, "lessons", "14_context_parallel", "hints.md"))[2])
                for _ in range(n + 2):
                    _, last = self.run_hint("14", "2")
                self.assertIn(f"hint {n} of {n}", last)
                self.assertIn("all", last)
                self.run_hint("14", "2", "--reset")
                _, restart = self.run_hint("14", "2")
                self.assertIn("hint 1 of", restart)
            finally:
                hint.STATE = old

    def test_unknown_lesson_and_task_are_refused_with_the_choices(self):
        with self.assertRaises(SystemExit) as e:
            self.run_hint("99", "1")
        self.assertIn("the lessons are", str(e.exception))
        with self.assertRaises(SystemExit) as e:
            self.run_hint("14", "9")
        self.assertIn("has hints for task(s)", str(e.exception))


if __name__ == "__main__":
    unittest.main()
