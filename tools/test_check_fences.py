#!/usr/bin/env python3
"""Self-test of tools/check_fences on small made-up lesson trees.
Run: python3 tools/test_check_fences.py"""
import contextlib
import importlib.machinery
import importlib.util
import io
import os
import shutil
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
_loader = importlib.machinery.SourceFileLoader("check_fences", os.path.join(HERE, "check_fences"))
_spec = importlib.util.spec_from_loader("check_fences", _loader)
check_fences = importlib.util.module_from_spec(_spec)
_loader.exec_module(check_fences)

LESSON = ("#include <x.h>\n"
          "// TODO(task1) BEGIN: write the loop (about 3 lines)\n"
          "MGPU_FAIL(\"TODO(task1): not written yet\");\n"
          "// TODO(task1) END\n"
          "int after = 1;\n"
          "# TODO(task2) BEGIN\n"
          "# TODO(task2) END\n"
          "int last = 2;\n")
SOLUTION = LESSON.replace('MGPU_FAIL("TODO(task1): not written yet");\n', "for (;;) {}\nreturn;\n") \
                 .replace("# TODO(task2) BEGIN\n", "# TODO(task2) BEGIN\nreduce();\n")


class CheckFencesTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="mgpu-fences-")
        self.write("lessons/00_x/k.cpp", LESSON)
        self.write("solutions/00_x/k.cpp", SOLUTION)
        self.write("lessons/00_x/README.md", "Fences look like `// TODO(task1) BEGIN`.\n")

    def tearDown(self):
        shutil.rmtree(self.root)

    def write(self, rel, text, mode="w"):
        path = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, mode) as f:
            f.write(text)

    def check(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = check_fences.main(["--root", self.root])
        return rc, out.getvalue()

    def test_twins_that_differ_only_inside_fences_pass(self):
        rc, out = self.check()
        self.assertEqual(rc, 0, out)
        self.assertIn("1 twin file(s) in 1 lesson(s), 0 problem(s)", out)

    def test_a_change_outside_the_fences_is_reported_with_line_and_task(self):
        self.write("solutions/00_x/k.cpp", SOLUTION.replace("int after = 1;", "int after = 2;"))
        rc, out = self.check()
        self.assertEqual(rc, 1)
        self.assertIn("solutions/00_x/k.cpp:6: [task1] differs outside the fences", out)

    def test_a_changed_marker_line_is_reported(self):
        self.write("solutions/00_x/k.cpp", SOLUTION.replace("(about 3 lines)", "(about 4 lines)"))
        rc, out = self.check()
        self.assertEqual(rc, 1)
        self.assertIn("[task1] the BEGIN marker line differs", out)

    def test_a_missing_final_newline_is_a_difference(self):
        self.write("solutions/00_x/k.cpp", SOLUTION.rstrip("\n"))
        rc, out = self.check()
        self.assertEqual(rc, 1)
        self.assertIn("no newline at end of file", out)

    def test_unbalanced_and_mismatched_fences(self):
        self.write("solutions/00_x/k.cpp", SOLUTION.replace("# TODO(task2) END\n", ""))
        self.write("lessons/00_x/j.h", "// TODO(task3) BEGIN\n// TODO(task4) END\n")
        rc, out = self.check()
        self.assertEqual(rc, 1)
        self.assertIn("TODO(task2) BEGIN is never closed", out)
        self.assertIn("TODO(task4) END closes TODO(task3) BEGIN", out)

    def test_a_solution_file_without_a_twin(self):
        self.write("solutions/00_x/extra.cpp", "int x;\n")
        rc, out = self.check()
        self.assertEqual(rc, 1)
        self.assertIn("solutions/00_x/extra.cpp: [-] no twin lessons/00_x/extra.cpp", out)

    def test_a_fenced_exercise_needs_a_solution(self):
        self.write("lessons/00_x/todo.cpp", "// TODO(task5) BEGIN\n// TODO(task5) END\n")
        self.write("lessons/00_x/contract.h", "int f();  // no fence: fine\n")
        rc, out = self.check()
        self.assertEqual(rc, 1)
        self.assertIn("lessons/00_x/todo.cpp: [-] has TODO fences but no completed twin", out)
        self.assertNotIn("contract.h", out)

    def test_a_marker_inside_code_is_not_a_fence(self):
        self.write("lessons/00_x/s.cpp", 'throw Error("TODO(task1) END");\n' + LESSON)
        self.write("solutions/00_x/s.cpp", 'throw Error("TODO(task1) END");\n' + SOLUTION)
        rc, out = self.check()
        self.assertEqual(rc, 0, out)

    def test_solutions_hold_fenced_files_and_the_build_stub_only(self):
        self.write("lessons/00_x/given.cpp", "int provided();\n")
        self.write("solutions/00_x/given.cpp", "int provided();\n")
        for variant in ("lessons", "solutions"):
            self.write(f"{variant}/00_x/meson.build", "# the same in every lesson folder\n")
        rc, out = self.check()
        self.assertEqual(rc, 1)
        self.assertIn("solutions/00_x/given.cpp: [-] has no TODO fence", out)
        self.assertNotIn("meson.build: [-]", out)


if __name__ == "__main__":
    unittest.main(verbosity=2)
