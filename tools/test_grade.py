#!/usr/bin/env python3
"""Self-test of tools/grade: its Catch2 parsing on canned output, its reports, and whole
runs against fake test binaries (a crash, a hang, a GPU skip, an MPI case that fails only
with 3 ranks). Run: python3 tools/test_grade.py"""
import contextlib
import importlib.machinery
import importlib.util
import io
import json
import os
import shutil
import stat
import sys
import tempfile
import textwrap
import unittest
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
_loader = importlib.machinery.SourceFileLoader("grade", os.path.join(HERE, "grade"))
_spec = importlib.util.spec_from_loader("grade", _loader)
grade = importlib.util.module_from_spec(_spec)
_loader.exec_module(grade)

# What Catch2 v2.13 writes with `-r xml -d yes` (trimmed): a pass, a failed CHECK inside a
# section with an INFO, an exception with captured stdout, a crash.
CANNED_XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<Catch name="test_00_gpu_basics" filters="~[gpu]">
  <Group name="test_00_gpu_basics">
    <TestCase name="saxpy matches" tags="[00_gpu_basics][points:3][task1]" filename="t.cpp" line="14">
      <OverallResult success="true" durationInSeconds="0.25"/>
    </TestCase>
    <TestCase name="reduce &lt;sums&gt;" tags="[00_gpu_basics][points:4][task2]" filename="t.cpp" line="15">
      <Section name="n = 1000" filename="t.cpp" line="16">
        <Info>
          n = 1000
        </Info>
        <Expression success="false" type="CHECK" filename="t.cpp" line="18">
          <Original>
            got == want
          </Original>
          <Expanded>
            2.0f == 3.0f
          </Expanded>
        </Expression>
        <OverallResults successes="0" failures="1" expectedFailures="0"/>
      </Section>
      <OverallResult success="false" durationInSeconds="0.5"/>
    </TestCase>
    <TestCase name="throws" tags="[00_gpu_basics][points:1][task1]" filename="t.cpp" line="17">
      <Exception filename="t.cpp" line="17">
        TODO(task1): saxpy_cpu is not written yet
      </Exception>
      <OverallResult success="false">
        <StdOut>
printed by the test
        </StdOut>
      </OverallResult>
    </TestCase>
    <TestCase name="crash" tags="[00_gpu_basics][task3]" filename="t.cpp" line="20">
      <FatalErrorCondition filename="t.cpp" line="20">
        SIGSEGV - Segmentation violation signal
      </FatalErrorCondition>
      <OverallResult success="false"/>
    </TestCase>
    <OverallResults successes="1" failures="3" expectedFailures="0"/>
  </Group>
  <OverallResults successes="1" failures="3" expectedFailures="0"/>
</Catch>
"""

# `--list-tests` wraps long names (indent 4) and tags (indent 6) at 80 columns.
CANNED_LIST = """\
Matching test cases:
  reduce gpu
      [00_gpu_basics][gpu][points:2][task2]
  a very long gpu test case name that goes on and on, well past the eighty
    column console width of catch
      [00_gpu_basics][and-another-long-tag-name][gpu][points:5][some-other-tag]
      [task3][x]
  #hash name
      [gpu]
3 matching test cases

"""
CANNED_NAMES = ("reduce gpu\n"
                "a very long gpu test case name that goes on and on, well past the eighty "
                "column console width of catch\n"
                '"#hash name"\n')


class ParseTest(unittest.TestCase):
    def test_cases_tags_and_outcomes(self):
        cases, complete = grade.parse_catch_xml(CANNED_XML)
        self.assertTrue(complete)
        self.assertEqual([c["name"] for c in cases], ["saxpy matches", "reduce <sums>", "throws", "crash"])
        self.assertEqual([c["success"] for c in cases], [True, False, False, False])
        self.assertEqual(cases[0]["seconds"], 0.25)
        self.assertEqual(grade.points_of(cases[1]["tags"]), 4)
        self.assertEqual(grade.task_of(cases[1]["tags"]), "task2")
        self.assertEqual(grade.points_of(cases[3]["tags"]), 0)
        self.assertEqual(grade.task_of("[gpu]"), "-")

    def test_failure_output(self):
        cases, _ = grade.parse_catch_xml(CANNED_XML)
        self.assertEqual(cases[0]["output"], "")
        out = cases[1]["output"]
        self.assertIn("t.cpp:18: [n = 1000] CHECK( got == want ) failed with expansion: 2.0f == 3.0f", out)
        self.assertIn("info: n = 1000", out)
        self.assertIn("TODO(task1): saxpy_cpu is not written yet", cases[2]["output"])
        self.assertIn("printed by the test", cases[2]["output"])
        self.assertIn("SIGSEGV", cases[3]["output"])

    def test_truncated_report_keeps_finished_cases(self):
        cut = CANNED_XML.index('<TestCase name="throws"') + 40
        cases, complete = grade.parse_catch_xml(CANNED_XML[:cut])
        self.assertFalse(complete)
        self.assertEqual([c["name"] for c in cases], ["saxpy matches", "reduce <sums>"])
        self.assertEqual(grade.parse_catch_xml(""), ([], False))

    def test_noise_around_the_report(self):
        noisy = "device mapping: cuda:0 -> GPU 0\n" + CANNED_XML + "mpirun: 1 process exited\n"
        cases, complete = grade.parse_catch_xml(noisy)
        self.assertTrue(complete)
        self.assertEqual(len(cases), 4)

    def test_list_with_wrapped_names(self):
        listed = grade.parse_test_list(CANNED_NAMES, CANNED_LIST)
        self.assertEqual(len(listed), 3)
        self.assertEqual(listed[0], ("reduce gpu", "[00_gpu_basics][gpu][points:2][task2]"))
        self.assertTrue(listed[1][0].endswith("width of catch"))
        self.assertEqual(grade.points_of(listed[1][1]), 5)
        self.assertEqual(grade.task_of(listed[1][1]), "task3")
        self.assertEqual(listed[2], ("#hash name", "[gpu]"))

    def test_ninja_failures(self):
        log = textwrap.dedent("""\
            [1/3] Compiling C++ object common/libmgpu.a.p/x.cpp.o
            FAILED: lessons/00_gpu_basics/libbasics.a.p/saxpy.cpp.o
            c++ -c saxpy.cpp
            ../lessons/00_gpu_basics/saxpy.cpp:12:3: error: 'y' was not declared in this scope
            ninja: build stopped: subcommands failed.
            """)
        blocks = grade.parse_ninja_failures(log)
        self.assertEqual(len(blocks), 1)
        self.assertTrue(blocks[0][0].startswith("lessons/00_gpu_basics/"))
        self.assertIn("was not declared", blocks[0][1])


def case(name, status, points=1, task="task1", kind="cpu", output=""):
    return grade.Case(name, f"[99_x][{task}][points:{points}]", status, output, kind=kind)


class ReportTest(unittest.TestCase):
    def test_mpi_case_passes_only_when_every_run_passes(self):
        merged = grade.merge_mpi_runs([
            (2, [case("a", "passed", kind="mpi"), case("b", "passed", kind="mpi"),
                 case("c", "passed", kind="mpi"), case("d", "skipped", kind="mpi")]),
            (3, [case("a", "passed", kind="mpi"), case("b", "failed", kind="mpi", output="3 != 3"),
                 case("d", "skipped", kind="mpi")]),
        ])
        status = {c.name: c.status for c in merged}
        self.assertEqual(status, {"a": "passed", "b": "failed", "c": "failed", "d": "skipped"})
        by_name = {c.name: c for c in merged}
        self.assertIn("-np 3", by_name["b"].output)
        self.assertIn("3 != 3", by_name["b"].output)
        self.assertIn("not reported", by_name["c"].output)

    def test_summary_line(self):
        self.assertEqual(grade.summary_line(3, 1, 0), "3 passed, 1 failed")
        self.assertEqual(grade.summary_line(0, 0, 2), "0 passed, 0 failed, 2 skipped")

    def test_results_json_and_junit(self):
        res = grade.LessonResult("99_x", "lessons", [
            case("p", "passed", 3), case("f", "failed", 4, "task2", output="boom"),
            case("s", "skipped", 2, kind="gpu", output="no GPU")])
        data = grade.results_json([res])
        self.assertEqual((data["score"], data["max_score"]), (3, 7))  # skipped not counted
        self.assertEqual([t["status"] for t in data["tests"]], ["passed", "failed", "skipped"])
        self.assertEqual(data["tests"][1]["output"], "boom")
        for t in data["tests"]:
            self.assertEqual(set(t), {"name", "score", "max_score", "status", "output"})
        suite = ET.fromstring(grade.junit_xml([res])).find("testsuite")
        self.assertEqual((suite.get("tests"), suite.get("failures"), suite.get("skipped")), ("3", "1", "1"))
        tcs = suite.findall("testcase")
        self.assertIsNotNone(tcs[1].find("failure"))
        self.assertIsNotNone(tcs[2].find("skipped"))

    def test_check_exercise_verdicts(self):
        learner = grade.LessonResult("99_x", "lessons", [
            case("todo", "failed"), case("already passes", "passed"),
            case("helper", "passed", points=0), case("gpu", "skipped", kind="gpu")])
        reference = grade.LessonResult("99_x", "solutions", [
            case("todo", "passed"), case("already passes", "passed"),
            case("helper", "passed", points=0), case("gpu", "skipped", kind="gpu"),
            case("broken reference", "failed", output="wrong")])
        verdict = {c.name: c for c in grade.check_exercise(learner, reference).cases}
        self.assertEqual(verdict["todo"].status, "passed")
        self.assertEqual(verdict["already passes"].status, "failed")
        self.assertIn("passes on the unmodified exercise", verdict["already passes"].output)
        self.assertEqual(verdict["helper"].status, "passed")
        self.assertEqual(verdict["gpu"].status, "skipped")
        self.assertEqual(verdict["broken reference"].status, "failed")


# A stand-in for a Catch2 test binary: the flags tools/grade uses, a few canned cases.
FAKE_BINARY = r'''#!/usr/bin/env python3
import os, sys, time
from xml.sax.saxutils import quoteattr
CASES = [  # name, tags, behaviour
    ("adds", "[99_fake][task1][points:2]", os.environ.get("FAKE_ADDS", "pass")),
    ("scales", "[99_fake][task2][points:3]", "pass"),
    ("on the gpu", "[99_fake][task2][points:1][gpu]", "pass"),
    ("needs 2 ranks", "[99_fake][task3][points:4]", "fail_np3"),
]
args = sys.argv[1:]
if "--require-gpu" in args:
    print("SKIPPED: GPU tests not run: no CUDA GPU is visible (fake)")
    sys.exit(77)
rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
mpi = sys.argv[0].endswith("_mpi")
out = None
if "-o" in args:
    out = args[args.index("-o") + 1]
filt = args[-1]
def match(tags):
    if filt == "*": return True
    if filt.startswith("~"): return filt[1:] not in tags
    return filt in tags
cases = [c for c in CASES if match(c[1]) and (mpi or c[2] != "fail_np3")]
if rank != 0:
    sys.stdout = open(os.devnull, "w")
if "--list-test-names-only" in args:
    print("\n".join(c[0] for c in cases)); sys.exit(0)
if "--list-tests" in args:
    print("Matching test cases:")
    for c in cases: print("  " + c[0] + "\n      " + c[1])
    sys.exit(len(cases))
print("some printf noise from the library")
stream = open(out, "w") if out else sys.stdout
stream.write('<?xml version="1.0" encoding="UTF-8"?>\n<Catch name="fake">\n <Group name="fake">\n')
failed = 0
for name, tags, how in cases:
    stream.write(f'  <TestCase name={quoteattr(name)} tags={quoteattr(tags)}>\n'); stream.flush()
    if how == "hang":
        time.sleep(600)
    if how == "crash":
        os.abort()
    ok = how == "pass" or (how == "fail_np3" and size != 3)
    failed += not ok
    if not ok:
        stream.write('   <Expression success="false" type="REQUIRE" filename="f.cpp" line="9">'
                     f'<Original>ok</Original><Expanded>false (world {size})</Expanded></Expression>\n')
    stream.write(f'   <OverallResult success="{str(ok).lower()}"/>\n  </TestCase>\n')
stream.write(" </Group>\n</Catch>\n")
stream.close()
sys.exit(failed)
'''


class EndToEndTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="mgpu-grade-test-")
        for variant in ("lessons", "solutions"):
            os.makedirs(os.path.join(self.tmp, variant, "99_fake"))
            self.fake(variant, "test_99_fake")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def fake(self, variant, name):
        path = os.path.join(self.tmp, variant, "99_fake", name)
        with open(path, "w") as f:
            f.write(FAKE_BINARY)
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)

    def grade(self, *args, env=None):
        old = dict(os.environ)
        os.environ.update(env or {})
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                rc = grade.main(["--no-build", "--build-dir", self.tmp, *args])
        finally:
            os.environ.clear()
            os.environ.update(old)
        return rc, out.getvalue()

    def test_reference_passes_and_gpu_cases_are_skipped(self):
        results = os.path.join(self.tmp, "results.json")
        rc, out = self.grade("--reference", "--results-json", results, "99")
        self.assertEqual(rc, 0, out)
        self.assertEqual(out.strip().splitlines()[-1], "2 passed, 0 failed, 1 skipped")
        self.assertIn("SKIPPED on the gpu [task2]: GPU tests not run", out)
        with open(results) as f:
            data = json.load(f)
        self.assertEqual((data["score"], data["max_score"]), (5, 5))

    def test_failure_scores_zero_for_its_case(self):
        rc, out = self.grade("99_fake", env={"FAKE_ADDS": "fail"})
        self.assertEqual(rc, 1)
        self.assertIn("FAILED  adds [task1]", out)
        self.assertIn("score: 3/5 points", out)
        self.assertEqual(out.strip().splitlines()[-1], "1 passed, 1 failed, 1 skipped")

    def test_crash_fails_the_unreported_cases(self):
        rc, out = self.grade("99", env={"FAKE_ADDS": "crash"})
        self.assertEqual(rc, 1)
        self.assertIn("crashed (SIGABRT)", out)
        self.assertEqual(out.strip().splitlines()[-1], "0 passed, 2 failed, 1 skipped")

    def test_a_hang_is_killed_by_the_timeout(self):
        rc, out = self.grade("--timeout", "2", "99", env={"FAKE_ADDS": "hang"})
        self.assertEqual(rc, 1)
        self.assertIn("timed out after 2 s", out)
        self.assertEqual(out.strip().splitlines()[-1], "0 passed, 2 failed, 1 skipped")

    def test_check_exercise_names_a_test_that_cannot_fail(self):
        rc, out = self.grade("--check-exercise")
        self.assertEqual(rc, 1)
        self.assertIn("passes on the unmodified exercise", out)
        self.assertEqual(out.strip().splitlines()[-1], "0 passed, 2 failed, 1 skipped")

    def test_no_lessons_with_tests(self):
        empty = tempfile.mkdtemp(prefix="mgpu-grade-empty-")
        try:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                rc = grade.main(["--no-build", "--build-dir", empty])
        finally:
            shutil.rmtree(empty)
        self.assertEqual(rc, 0)
        self.assertIn("no lessons with tests found", out.getvalue())
        self.assertEqual(out.getvalue().strip().splitlines()[-1], "0 passed, 0 failed")

    @unittest.skipUnless(shutil.which("mpirun"), "mpirun not installed")
    def test_mpi_case_must_pass_with_2_and_3_ranks(self):
        self.fake("solutions", "test_99_fake_mpi")
        rc, out = self.grade("--reference", "99")
        self.assertEqual(rc, 1, out)
        self.assertIn("FAILED  needs 2 ranks [task3] (mpi)", out)
        self.assertIn("-np 3: failed", out)
        # 2 cpu + 2 mpi cases pass (adds, scales twice); needs 2 ranks fails; 2 gpu skipped
        self.assertEqual(out.strip().splitlines()[-1], "4 passed, 1 failed, 2 skipped")


if __name__ == "__main__":
    unittest.main(verbosity=2)
