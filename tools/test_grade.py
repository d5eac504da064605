#!/usr/bin/env python3
"""Self-test of tools/grade: its Catch2 parsing on canned output, compile errors sorted by
task, its reports and GPU policy, submissions spliced into a clean copy, and whole runs
against fake test binaries (a crash and a hang that cost only their own case, a GPU
skip, an MPI case that fails only with 3 ranks, an MPI abort, the usage errors).
Also tools/class_summary. Run: python3 tools/test_grade.py"""
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
_loader = importlib.machinery.SourceFileLoader("class_summary", os.path.join(HERE, "class_summary"))
_spec = importlib.util.spec_from_loader("class_summary", _loader)
class_summary = importlib.util.module_from_spec(_spec)
_loader.exec_module(class_summary)
from grading import building, catch2, confine, process, reports, running, submission, verdicts  # noqa: E402
from grading import summary                                         # noqa: E402
from grading.course import Course                                   # noqa: E402
import subprocess                                                   # noqa: E402

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


class TaskBinaryTest(unittest.TestCase):
    """The learner's build has one test binary per task (it links the learner's code of
    that task alone): each must run its task's cases, the whole one the cases of no task."""

    BINARIES = ["lessons/05_ddp/test_05_ddp", "lessons/05_ddp/test_05_ddp_task1",
                "lessons/05_ddp/test_05_ddp_task10_mpi", "lessons/05_ddp/test_05_ddp_task2_mpi"]

    def test_each_binary_runs_its_own_cases(self):
        f = lambda b: running.cases_filter(b, self.BINARIES)
        self.assertEqual(f("lessons/05_ddp/test_05_ddp_task1"), "[task1]")
        self.assertEqual(f("lessons/05_ddp/test_05_ddp_task10_mpi"), "[task10]")
        self.assertEqual(f("lessons/05_ddp/test_05_ddp"), "~[task1]~[task2]~[task10]")
        self.assertEqual(running.cases_filter("solutions/05_ddp/test_05_ddp",
                                              ["solutions/05_ddp/test_05_ddp"]), "")

    def test_selects_follows_the_filter(self):
        self.assertTrue(grade.selects("[task1]", "[05_ddp][task1][points:2]"))
        self.assertFalse(grade.selects("[task1]", "[05_ddp][task10][points:2]"))
        self.assertTrue(grade.selects("~[task1]~[task2]", "[05_ddp][library]"))
        self.assertFalse(grade.selects("~[task1]~[task2]", "[05_ddp][task2][points:1]"))
        self.assertTrue(grade.selects("", "[anything]"))

    def test_task_binaries_are_found_and_attributed(self):
        with tempfile.TemporaryDirectory() as root:
            b = building.BuildDir(root, os.path.join(root, "build"))
            b._targets = [{"type": "executable", "name": os.path.basename(p),
                           "filename": [os.path.join(b.path, p)], "target_sources": []}
                          for p in self.BINARIES + ["solutions/05_ddp/test_05_ddp_mpi"]]
            found = b.test_binaries()
            self.assertEqual(sorted(found[("lessons", "05_ddp")]), sorted(self.BINARIES))
            self.assertEqual(found[("solutions", "05_ddp")], ["solutions/05_ddp/test_05_ddp_mpi"])
            self.assertEqual(b.owner_of("liblessons_05_ddp.reducer_finalize_cpp.a.p/x.cpp.o"),
                             ("lessons", "05_ddp"))
            self.assertEqual(b.owner_of("libsolutions_10_sharding.a.p/y.cpp.o"),
                             ("solutions", "10_sharding"))

    def test_the_targets_read_before_configuring_are_read_again_after(self):
        # A fresh clone: the grader asks for the targets (none yet), configures, and must
        # then find the lesson's alias, or ninja would build the whole course.
        with tempfile.TemporaryDirectory() as root:
            b = building.BuildDir(root, os.path.join(root, "build"))
            self.assertEqual(b.lesson_target("lessons", "15_3d_parallel"), None)

            def fake_setup(argv, timeout, cwd=None, **kw):
                os.makedirs(os.path.join(b.path, "meson-info"))
                with open(os.path.join(b.path, "meson-info", "intro-targets.json"), "w") as f:
                    json.dump([{"type": "run", "name": "lessons-15_3d_parallel",
                                "filename": [], "target_sources": []}], f)
                return process.Run(0, "", "", False, 0.0)
            real = building.run
            building.run = fake_setup
            try:
                self.assertTrue(b.configure())
            finally:
                building.run = real
            self.assertEqual(b.lesson_target("lessons", "15_3d_parallel"), "lessons-15_3d_parallel")


class ParseTest(unittest.TestCase):
    def test_cases_tags_and_outcomes(self):
        report = catch2.parse_catch_xml(CANNED_XML)
        cases = report.cases
        self.assertTrue(report.complete)
        self.assertIsNone(report.started)
        self.assertEqual([c["name"] for c in cases], ["saxpy matches", "reduce <sums>", "throws", "crash"])
        self.assertEqual([c["success"] for c in cases], [True, False, False, False])
        self.assertEqual(cases[0]["seconds"], 0.25)
        self.assertEqual(catch2.points_of(cases[1]["tags"]), 4)
        self.assertEqual(catch2.task_of(cases[1]["tags"]), "task2")
        self.assertEqual(catch2.points_of(cases[3]["tags"]), 0)
        self.assertEqual(catch2.task_of("[gpu]"), "-")

    def test_failure_output(self):
        cases = catch2.parse_catch_xml(CANNED_XML).cases
        self.assertEqual(cases[0]["output"], "")
        out = cases[1]["output"]
        # The context first: the section path and the INFO, then the failed expression.
        self.assertEqual(out.splitlines(), [
            "section: n = 1000", "info: n = 1000",
            "t.cpp:18: CHECK( got == want ) failed with expansion: 2.0f == 3.0f"])
        self.assertIn("TODO(task1): saxpy_cpu is not written yet", cases[2]["output"])
        self.assertIn("printed by the test", cases[2]["output"])
        self.assertIn("SIGSEGV", cases[3]["output"])

    def test_truncated_report_keeps_finished_cases_and_names_the_open_one(self):
        cut = CANNED_XML.index('<TestCase name="throws"') + 120
        report = catch2.parse_catch_xml(CANNED_XML[:cut])
        self.assertFalse(report.complete)
        self.assertEqual([c["name"] for c in report.cases], ["saxpy matches", "reduce <sums>"])
        self.assertEqual(report.started, ("throws", "[00_gpu_basics][points:1][task1]"))
        empty = catch2.parse_catch_xml("")
        self.assertEqual((empty.cases, empty.complete, empty.started), ([], False, None))

    def test_noise_around_the_report(self):
        noisy = "device mapping: cuda:0 -> GPU 0\n" + CANNED_XML + "mpirun: 1 process exited\n"
        report = catch2.parse_catch_xml(noisy)
        self.assertTrue(report.complete)
        self.assertEqual(len(report.cases), 4)

    def test_list_with_wrapped_names(self):
        listed = catch2.parse_test_list(CANNED_NAMES, CANNED_LIST)
        self.assertEqual(len(listed), 3)
        self.assertEqual(listed[0], ("reduce gpu", "[00_gpu_basics][gpu][points:2][task2]"))
        self.assertTrue(listed[1][0].endswith("width of catch"))
        self.assertEqual(catch2.points_of(listed[1][1]), 5)
        self.assertEqual(catch2.task_of(listed[1][1]), "task3")
        self.assertEqual(listed[2], ("#hash name", "[gpu]"))

    def test_what_a_broken_run_printed_leads_with_the_reason(self):
        r = process.Run(3, 'noise\n<?xml version="1.0"?>\n<Catch><TestCase name="x">\n<Info>p</Info>',
                        "MPI_ABORT was invoked on rank 1\n[rank 0] mgpu::dist timeout: recv #2 "
                        "did not complete within 30 s\n[vm:1] ORTE_ERROR_LOG: unpack\n", False, 1)
        self.assertEqual(r.tail(), "[rank 0] mgpu::dist timeout: recv #2 did not complete within 30 s")
        self.assertNotIn("<Info>", process.Run(1, "<Catch><Info>p</Info>", "boom\n", False, 1).tail())

    def test_the_library_times_out_a_collective_before_the_launch_limit(self):
        old = os.environ.pop("MGPU_DIST_TIMEOUT_S", None)
        try:
            self.assertEqual(running.Runner(300, "/", HERE).env["MGPU_DIST_TIMEOUT_S"], "5")
            self.assertEqual(running.Runner(10, "/", HERE).env["MGPU_DIST_TIMEOUT_S"], "5")
            self.assertNotIn("MGPU_DIST_TIMEOUT_S", running.Runner(0, "/", HERE).env)
        finally:
            if old is not None:
                os.environ["MGPU_DIST_TIMEOUT_S"] = old

    def test_name_filter_escapes_the_spec_language(self):
        self.assertEqual(catch2.name_filter(["a, b", "c[1]", "d*"]), r"a\, b,c\[1\],d\*")

    def test_test_cases_listed_from_sources(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "t.cpp")
            with open(path, "w") as f:
                f.write('TEST_CASE("sums, exactly", "[99_x][task1]"\n          "[points:3]") {}\n'
                        'TEST_CASE( "with \\"quotes\\"" , "[gpu][task2]" ) {}\n')
            self.assertEqual(building.cases_in_sources([path]),
                             [("sums, exactly", "[99_x][task1][points:3]"),
                              ('with "quotes"', "[gpu][task2]")])

    def test_ninja_failures(self):
        log = textwrap.dedent("""\
            [1/3] Compiling C++ object common/libmgpu.a.p/x.cpp.o
            FAILED: liblessons_00_gpu_basics.a.p/lessons_00_gpu_basics_saxpy.cpp.o
            c++ -c saxpy.cpp
            ../lessons/00_gpu_basics/saxpy.cpp:12:3: error: 'y' was not declared in this scope
            ninja: build stopped: subcommands failed.
            """)
        blocks = building.parse_ninja_failures(log)
        self.assertEqual(len(blocks), 1)
        self.assertIn("was not declared", blocks[0][1])
        b = building.BuildDir("/nowhere", "/nowhere/build")
        self.assertEqual(b.owner_of(blocks[0][0]), ("lessons", "00_gpu_basics"))
        self.assertEqual(b.owner_of("solutions/04_collectives/test_04_collectives_mpi"),
                         ("solutions", "04_collectives"))
        self.assertEqual(b.owner_of("lessons/00_gpu_basics/saxpy.cu.o"), ("lessons", "00_gpu_basics"))
        self.assertIsNone(b.owner_of("common/libmgpu.a.p/x.cpp.o"))


class CompileErrorTest(unittest.TestCase):
    """Errors go to the task whose fence they are in, with paths from the project root."""

    def test_errors_sorted_by_task(self):
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "lessons", "99_x"))
            with open(os.path.join(root, "lessons", "99_x", "k.cu"), "w") as f:
                f.write("int a;\n// TODO(task1) BEGIN\nint b = ;\n// TODO(task1) END\n"
                        "// TODO(task2) BEGIN\n// TODO(task2) END\nint c;\n")
            b = building.BuildDir(root, os.path.join(root, "build"))
            b.failures = [
                ("lessons/99_x/k.cu.o", "../lessons/99_x/k.cu(3): error: expected an expression"),
                ("liblessons_99_x.a.p/k.cpp.o", "../lessons/99_x/k.cu:7:1: error: c again"),
                ("solutions/99_x/k.cu.o", "../solutions/99_x/k.cu(3): error: other variant"),
                ("common/libmgpu.a.p/t.cpp.o", "../common/src/t.cpp:1:1: error: library"),
            ]
            errors = b.errors_of("lessons", "99_x")
            self.assertEqual([e.task for e in errors], ["task1", "-"])
            self.assertEqual(errors[0].where, "lessons/99_x/k.cu")
            self.assertTrue(errors[0].text.startswith("lessons/99_x/k.cu(3): error"))
            self.assertIn("outside the fences", errors[1].where)
            self.assertEqual([o for o, _ in b.other_failures({("lessons", "99_x")})],
                             ["solutions/99_x/k.cu.o", "common/libmgpu.a.p/t.cpp.o"])


    def test_a_submission_s_errors_quote_its_own_files_only(self):
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "lessons", "99_x"))
            with open(os.path.join(root, "lessons", "99_x", "k.cpp"), "w") as f:
                f.write("int a;\n// TODO(task1) BEGIN\n#include \"/etc/passwd\"\n"
                        "// TODO(task1) END\nint c;\n")
            gcc = ("In file included from ../lessons/99_x/k.cpp:3:\n"
                   "/etc/passwd: In function 'void f()':\n"
                   "/etc/passwd:1:9: error: expected ';' before ':' token\n"
                   "    1 | root:x:0:0:root:/root:/bin/bash\n"
                   "      |         ^\n"
                   "../lessons/99_x/k.cpp:5:5: error: redefinition of 'int c'\n"
                   "    5 | int c;\n"
                   "      |     ^\n"
                   "../common/include/mgpu/x.h:1:5: note: 'int c' previously declared here\n"
                   "    1 | int c;\n"
                   "/usr/bin/ld: undefined reference to `f()'\n")
            for own_only in (False, True):
                b = building.BuildDir(root, os.path.join(root, "build"), own_only=own_only)
                b.failures = [("liblessons_99_x.a.p/k.cpp.o", gcc)]
                e, = b.errors_of("lessons", "99_x")
                self.assertEqual((e.task, e.where), ("task1", "lessons/99_x/k.cpp"))
                self.assertEqual("root:x" in e.text, not own_only)
            self.assertEqual(e.text.splitlines(), [
                "In file included from lessons/99_x/k.cpp:3:",
                "lessons/99_x/k.cpp:5:5: error: redefinition of 'int c'",
                "    5 | int c;", "      |     ^",
                "/usr/bin/ld: undefined reference to `f()'",
                "(6 line(s) about other files not shown: the report shows the submission's "
                "own files only)"])


def case(name, status, points=1, task="task1", kind="cpu", output="", gpu=False):
    tags = f"[99_x][{task}][points:{points}]" + ("[gpu]" if gpu else "")
    return catch2.Case(name, tags, status, output, kind=kind)


class ReportTest(unittest.TestCase):
    def test_mpi_case_passes_only_when_every_run_passes(self):
        merged = running.merge_mpi_runs([
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
        self.assertEqual(reports.summary_line(3, 1, 0), "3 passed, 1 failed")
        self.assertEqual(reports.summary_line(0, 0, 2), "0 passed, 0 failed, 2 skipped")

    def lesson(self):
        return reports.LessonResult("99_x", "lessons", [
            case("p", "passed", 3), case("f", "failed", 4, "task2", output="boom"),
            case("s", "skipped", 2, kind="gpu", output="no GPU", gpu=True)])

    def test_results_json_is_what_gradescope_reads(self):
        data = reports.results_json([self.lesson()], "exclude", ["GPU policy: exclude"], 12.5)
        self.assertEqual(data["score"], 3)
        self.assertEqual(data["execution_time"], 12)
        # Only 'passed' or 'failed'; the skipped GPU test is not a test entry but is named.
        self.assertEqual([(t["name"], t["status"], t["score"], t["max_score"]) for t in data["tests"]],
                         [("99_x [task1] p", "passed", 3, 3), ("99_x [task2] f", "failed", 0, 4)])
        self.assertIn("Not graded (1 GPU test(s)", data["output"])
        self.assertIn("99_x [task1] s: no GPU", data["output"])
        self.assertEqual(data["extra_data"]["gpu_policy"], "exclude")
        self.assertEqual(data["extra_data"]["not_graded"], 1)
        for t in data["tests"]:   # fields of Gradescope's format only
            self.assertEqual(set(t), {"name", "score", "max_score", "status", "output",
                                      "tags", "extra_data"})
        json.dumps(data)

    def test_results_json_has_each_test_s_task_and_each_task_s_subtotal(self):
        res = self.lesson()
        res.cases.append(case("f2", "passed", 5, "task2"))
        data = reports.results_json([res], "exclude", [], 3.6)
        self.assertEqual(data["execution_time"], 4)
        self.assertEqual([(t["extra_data"], t["tags"]) for t in data["tests"]], [
            ({"lesson": "99_x", "task": "task1"}, ["99_x", "task1"]),
            ({"lesson": "99_x", "task": "task2"}, ["99_x", "task2"]),
            ({"lesson": "99_x", "task": "task2"}, ["99_x", "task2"])])
        self.assertEqual(data["extra_data"]["tasks"], [
            {"lesson": "99_x", "task": "task1", "score": 3, "max_score": 3,
             "passed": 1, "failed": 0, "skipped": 1},
            {"lesson": "99_x", "task": "task2", "score": 5, "max_score": 9,
             "passed": 1, "failed": 1, "skipped": 0}])
        self.assertEqual(data["extra_data"]["max_score"], 12)
        self.assertEqual(data["score"], sum(t["score"] for t in data["extra_data"]["tasks"]))

    def test_gpu_policy_fail_counts_skipped_gpu_tests_as_failed(self):
        res = self.lesson()
        reports.apply_gpu_policy([res], "fail")
        data = reports.results_json([res], "fail", [], 0)
        self.assertEqual([t["status"] for t in data["tests"]], ["passed", "failed", "failed"])
        self.assertEqual(sum(t["max_score"] for t in data["tests"]), 9)
        self.assertIn("--gpu-policy fail", data["tests"][2]["output"])

    def test_junit(self):
        suite = ET.fromstring(reports.junit_xml([self.lesson()])).find("testsuite")
        self.assertEqual((suite.get("tests"), suite.get("failures"), suite.get("skipped")), ("3", "1", "1"))
        tcs = suite.findall("testcase")
        self.assertIsNotNone(tcs[1].find("failure"))
        self.assertIsNotNone(tcs[2].find("skipped"))

    def test_check_exercise_verdicts(self):
        learner = reports.LessonResult("99_x", "lessons", [
            case("todo", "failed"), case("already passes", "passed"),
            case("helper", "passed", points=0), case("gpu", "skipped", kind="gpu")])
        reference = reports.LessonResult("99_x", "solutions", [
            case("todo", "passed"), case("already passes", "passed"),
            case("helper", "passed", points=0), case("gpu", "skipped", kind="gpu"),
            case("broken reference", "failed", output="wrong")])
        verdict = {c.name: c for c in reports.check_exercise(learner, reference).cases}
        self.assertEqual(verdict["todo"].status, "passed")
        self.assertEqual(verdict["already passes"].status, "failed")
        self.assertIn("passes on the unmodified exercise", verdict["already passes"].output)
        self.assertEqual(verdict["helper"].status, "passed")
        self.assertEqual(verdict["gpu"].status, "skipped")
        self.assertEqual(verdict["broken reference"].status, "failed")

    def test_compile_errors_are_shown_once_per_task(self):
        err = building.CompileError("task2", "lessons/99_x/k.cpp", "k.cpp:3: error: nope")
        res = reports.LessonResult("99_x", "lessons",
                                   [case(f"t{i}", "failed", task="task2") for i in range(5)],
                                   [err], blocked=True)
        out = io.StringIO()
        reports.print_table(res, out)
        self.assertEqual(out.getvalue().count("error: nope"), 1)
        self.assertIn("5 test(s) not run", out.getvalue())
        self.assertIn("task2: lessons/99_x/k.cpp", out.getvalue())


class ClassSummaryTest(unittest.TestCase):
    """tools/class_summary: the batch loop's grades/NAME.json summed per student and task."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="mgpu-grade-class-")
        self.grades = os.path.join(self.tmp, "grades")
        os.makedirs(self.grades)

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def write(self, name, cases, policy="fail", lesson="12_transformer"):
        res = reports.LessonResult(lesson, "lessons", cases)
        with open(os.path.join(self.grades, name + ".json"), "w") as f:
            json.dump(reports.results_json([res], policy, []), f)
        with open(os.path.join(self.grades, name + ".txt"), "w") as f:
            f.write("score: ...\n")

    def run_summary(self, *args):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = class_summary.main(list(args))
        return rc, out.getvalue(), err.getvalue()

    def read_csv(self, name):
        with open(os.path.join(self.tmp, name)) as f:
            return f.read().splitlines()

    def class_of_two(self):
        self.write("alice", [case("a", "passed", 2, "task1"), case("b", "passed", 3, "task1"),
                             case("c", "failed", 4, "task2"), case("g", "passed", 1, "task2", gpu=True)])
        self.write("bob", [case("a", "failed", 2, "task1"), case("b", "passed", 3, "task1"),
                           case("c", "passed", 4, "task2"), case("g", "failed", 1, "task2", gpu=True)])

    def test_table_csv_and_gradescope_csv(self):
        self.class_of_two()
        csv_path, gs_path = os.path.join(self.tmp, "class.csv"), os.path.join(self.tmp, "gs.csv")
        rc, out, err = self.run_summary(self.grades, "--csv", csv_path, "--gradescope", gs_path)
        self.assertEqual(rc, 0, err)
        self.assertEqual(err, "")
        lines = out.splitlines()
        self.assertEqual(lines[0].split(), ["student", "12", "t1", "12", "t2", "points",
                                            "passed/failed/skipped"])
        self.assertEqual(lines[1].split(), ["(possible)", "5", "5", "10"])
        self.assertEqual(lines[2].split(), ["alice", "5", "1", "6/10", "3/1/0"])
        self.assertEqual(lines[3].split(), ["bob", "3", "4", "7/10", "2/2/0"])
        self.assertIn("2 student(s); mean 6.5 of 10 points", out)
        self.assertEqual(self.read_csv("class.csv"), [
            "student,total,max,passed,failed,skipped,gpu_policy,results_file,"
            "12_transformer/task1,12_transformer/task1 max,12_transformer/task2,12_transformer/task2 max",
            f"alice,6,10,3,1,0,fail,{self.grades}/alice.json,5,5,1,5",
            f"bob,7,10,2,2,0,fail,{self.grades}/bob.json,3,5,4,5"])
        self.assertEqual(self.read_csv("gs.csv"), [
            "student,total,12_transformer/task1,12_transformer/task2",
            "alice,6,5,1", "bob,7,3,4"])

    def test_defaults_write_beside_the_grades_and_name_what_differs(self):
        self.class_of_two()
        self.write("carol", [case("a", "passed", 2, "task1"), case("b", "passed", 3, "task1"),
                             case("c", "passed", 4, "task2"),
                             case("g", "skipped", 1, "task2", kind="gpu", gpu=True)], policy="exclude")
        rc, out, err = self.run_summary(self.grades)
        self.assertEqual(rc, 0, err)
        self.assertIn("different GPU policies (exclude: carol; fail: alice, bob)", err)
        self.assertIn("12_transformer/task2: the maximum is 5, but smaller for carol (4)", err)
        self.assertEqual(out.splitlines()[4].split(), ["carol", "5", "4", "9/9", "3/0/1"])
        self.assertTrue(os.path.exists(os.path.join(self.grades, "summary.csv")))
        self.assertTrue(os.path.exists(os.path.join(self.grades, "gradescope.csv")))

    def test_a_missing_or_malformed_results_file_is_named_and_stops_the_summary(self):
        self.class_of_two()
        with open(os.path.join(self.grades, "eve.json"), "w") as f:
            f.write('{"score": 3, "tests": [')                 # cut short
        with open(os.path.join(self.grades, "dave.txt"), "w") as f:
            f.write("grade: --submission class/dave has no lessons/ folder\n")
        with open(os.path.join(self.grades, "mallory.json"), "w") as f:
            json.dump({"score": 9, "tests": [{"name": "12_transformer [task1] a", "score": 9,
                                              "max_score": 2, "status": "passed"}]}, f)
        rc, out, err = self.run_summary(self.grades)
        self.assertEqual(rc, 2)
        self.assertEqual(out, "")
        self.assertIn(f"{self.grades}/eve.json: is not valid JSON: Expecting value at line 1, "
                      "column 24 (it ends early", err)
        self.assertIn(f"{self.grades}/dave.json: missing, though {self.grades}/dave.txt is there", err)
        self.assertIn("has no lessons/ folder", err)
        self.assertIn(f"{self.grades}/mallory.json: test 1 of 1 (12_transformer [task1] a) scores 9 of 2", err)
        self.assertIn("3 results file(s) missing or malformed; nothing written", err)
        self.assertFalse(os.path.exists(os.path.join(self.grades, "summary.csv")))
        # --skip-bad: the others are summed, each one left out named in a warning
        rc, out, err = self.run_summary(self.grades, "--skip-bad")
        self.assertEqual(rc, 0)
        self.assertIn(f"class_summary: warning: skipped {self.grades}/eve.json: is not valid JSON", err)
        self.assertIn(f"class_summary: warning: skipped {self.grades}/dave.json: missing", err)
        self.assertIn("skipped (warnings above): ", out)
        self.assertEqual([ln.split(",")[0] for ln in self.read_csv("grades/gradescope.csv")],
                         ["student", "alice", "bob"])

    def test_what_a_results_file_must_hold(self):
        bad = {
            "[]": "holds a JSON list",
            '{"score": 1}': 'has no "tests" list',
            '{"tests": []}': 'has no numeric top-level "score"',
            '{"score": 0, "tests": [{"name": "x", "score": 0, "max_score": 1, "status": "skipped"}]}':
                "has status 'skipped'",
            '{"score": 0, "tests": [{"name": "no task here", "score": 0, "max_score": 1, "status": "failed"}]}':
                "names no lesson and task",
            '{"score": 5, "tests": [{"name": "12_x [task1] a", "score": 1, "max_score": 1, "status": "passed"}]}':
                "is not the sum of its tests' scores (1)",
            "": "is empty",
        }
        path = os.path.join(self.grades, "x.json")
        for text, why in bad.items():
            with self.subTest(text=text):
                with open(path, "w") as f:
                    f.write(text)
                with self.assertRaises(summary.BadResults) as caught:
                    summary.read_results(path)
                self.assertIn(why, str(caught.exception))
                self.assertTrue(str(caught.exception).startswith(path + ": "))
        # A results file of an older tools/grade (no extra_data): the task is in the name.
        with open(path, "w") as f:
            f.write('{"score": 1, "tests": [{"name": "12_x [task1] a", "score": 1, '
                    '"max_score": 1, "status": "passed", "output": ""}]}')
        self.assertEqual(summary.read_results(path).tasks[("12_x", "task1")]["score"], 1)


class SubmissionTest(unittest.TestCase):
    COURSE = ("#include <a.h>\n// TODO(task1) BEGIN: write it\nFAIL();\n// TODO(task1) END\n"
              "int between;\n// TODO(task2) BEGIN\nFAIL();\n// TODO(task2) END\n")

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="mgpu-grade-sub-")
        self.course, self.student = os.path.join(self.tmp, "course"), os.path.join(self.tmp, "alice")
        for top in (self.course, self.student):
            self.write(top, "lessons/99_x/k.cpp", self.COURSE)
            self.write(top, "lessons/99_x/k.h", "int f();\n")
            self.write(top, "tests/99_x/t.cpp", "TEST_CASE(\"t\", \"[task1]\") {}\n")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def write(self, top, rel, text):
        path = os.path.join(top, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)

    def read(self, top, rel):
        with open(os.path.join(top, rel)) as f:
            return f.read()

    def test_only_fenced_code_is_taken_and_the_rest_is_reported(self):
        self.write(self.student, "lessons/99_x/k.cpp",
                   self.COURSE.replace("FAIL();\n// TODO(task1) END", "y = a * x + y;\n// TODO(task1) END")
                   .replace("int between;", "int between = 1;  // edited outside"))
        self.write(self.student, "tests/99_x/t.cpp", "TEST_CASE(\"t\", \"[task1]\") { /* always passes */ }\n")
        self.write(self.student, "notes.txt", "mine\n")
        course = Course(self.course)   # not a git checkout: every file
        self.assertEqual(course.files, ["lessons/99_x/k.cpp", "lessons/99_x/k.h", "tests/99_x/t.cpp"])
        checkout = os.path.join(self.tmp, "work", "course")
        submission.sync_clean_copy(course, checkout)
        exercise = submission.fenced_files(course)
        self.assertEqual(list(exercise), ["lessons/99_x/k.cpp"])
        notes = submission.take_fences(course, self.student, checkout, exercise, {})
        notes += submission.compare_rest(course, self.student, exercise, ["99_x"])
        spliced = self.read(checkout, "lessons/99_x/k.cpp")
        self.assertIn("y = a * x + y;", spliced)
        self.assertIn("int between;\n", spliced)          # the course's, not the edit
        self.assertEqual(self.read(checkout, "tests/99_x/t.cpp"), self.read(self.course, "tests/99_x/t.cpp"))
        text = "\n".join(notes)
        self.assertIn("lessons/99_x/k.cpp: changes outside the fences ignored", text)
        self.assertIn("edited outside the fences (1, ignored: the course's copy is used): tests/99_x/t.cpp", text)
        self.assertIn("files that are not the course's (1, ignored", text)
        # A task put back to the exercise keeps the course's body.
        submission.take_fences(course, self.student, checkout, exercise,
                               {"lessons/99_x/k.cpp": {"task1"}})
        self.assertEqual(self.read(checkout, "lessons/99_x/k.cpp"), self.COURSE)

    def test_missing_file_and_broken_fences(self):
        os.unlink(os.path.join(self.student, "lessons/99_x/k.cpp"))
        course = Course(self.course)
        exercise = submission.fenced_files(course)
        checkout = os.path.join(self.tmp, "w")
        submission.sync_clean_copy(course, checkout)
        notes = submission.take_fences(course, self.student, checkout, exercise, {})
        self.assertIn("not in the submission", notes[0])
        self.write(self.student, "lessons/99_x/k.cpp", self.COURSE.replace("// TODO(task2) END\n", ""))
        notes = submission.take_fences(course, self.student, checkout, exercise, {})
        self.assertIn("do not pair up", notes[0])
        self.assertEqual(self.read(checkout, "lessons/99_x/k.cpp"), self.COURSE)

    def solved(self):
        return self.COURSE.replace("FAIL();\n// TODO(task1) END", "y = a * x + y;\n// TODO(task1) END")

    def take(self):
        course = Course(self.course)
        exercise = submission.fenced_files(course)
        checkout = os.path.join(self.tmp, "w")
        submission.sync_clean_copy(course, checkout)
        notes = submission.take_fences(course, self.student, checkout, exercise, {})
        notes += submission.compare_rest(course, self.student, exercise, ["99_x"])
        return "\n".join(notes), self.read(checkout, "lessons/99_x/k.cpp")

    def test_nothing_is_read_through_a_link(self):
        other = os.path.join(self.tmp, "bob")   # another student's solved file
        self.write(other, "lessons/99_x/k.cpp", self.solved())
        self.write(other, "lessons/99_x/k.h", "int f();\n")
        mine = os.path.join(self.student, "lessons/99_x/k.cpp")
        os.unlink(mine)
        os.symlink(os.path.join(other, "lessons/99_x/k.cpp"), mine)
        notes, spliced = self.take()
        self.assertEqual(spliced, self.COURSE)
        self.assertIn("refused: lessons/99_x/k.cpp: a symbolic link (to ", notes)
        os.unlink(mine)   # a hard link to it: refused as well
        os.link(os.path.join(other, "lessons/99_x/k.cpp"), mine)
        notes, spliced = self.take()
        self.assertEqual(spliced, self.COURSE)
        self.assertIn("refused: lessons/99_x/k.cpp: a hard link", notes)
        shutil.rmtree(os.path.join(self.student, "lessons"))   # lessons/ itself a link
        os.symlink(os.path.join(other, "lessons"), os.path.join(self.student, "lessons"))
        notes, spliced = self.take()
        self.assertEqual(spliced, self.COURSE)
        self.assertIn("refused: lessons/ is a symbolic link (to ", notes)
        self.assertIn("not read (links, hard links or not regular files) (1, ignored: the "
                      "course's copy is used): lessons/99_x/k.h", notes)

    def test_files_over_the_limit_are_not_read(self):
        mine = os.path.join(self.student, "lessons/99_x/k.cpp")
        with open(mine, "w") as f:
            f.truncate(1 << 30)   # sparse: 1 GiB that takes no disk
        with open(os.path.join(self.student, "tests/99_x/t.cpp"), "w") as f:
            f.truncate(1 << 30)
        notes, spliced = self.take()
        self.assertEqual(spliced, self.COURSE)
        self.assertIn(f"refused: lessons/99_x/k.cpp: {1 << 30} bytes, over the limit", notes)
        self.assertIn("edited outside the fences (1, ignored: the course's copy is used): "
                      "tests/99_x/t.cpp", notes)

    def test_the_clean_copy_loses_what_a_previous_submission_left(self):
        checkout = os.path.join(self.tmp, "w")
        self.write(checkout, "stray.cpp", "x\n")
        self.write(checkout, "build/keep.o", "object\n")
        submission.sync_clean_copy(Course(self.course), checkout)
        self.assertFalse(os.path.exists(os.path.join(checkout, "stray.cpp")))
        self.assertTrue(os.path.exists(os.path.join(checkout, "build/keep.o")))


class CommittedCourseTest(SubmissionTest):
    """The clean copy is the committed course: an instructor's solved or edited working tree
    never reaches a student's grade."""

    def git(self, *args):
        subprocess.run(["git", "-C", self.course, *args], check=True, capture_output=True)

    def setUp(self):
        super().setUp()
        self.git("init", "-q")
        self.git("-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
        self.git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "course")

    def test_a_solved_working_tree_is_not_the_course(self):
        solved = self.COURSE.replace("FAIL();", "solved();")
        self.write(self.course, "lessons/99_x/k.cpp", solved)          # solved, not committed
        self.write(self.course, "lessons/99_x/untracked.cpp", "x\n")   # never committed
        course = Course(self.course)
        self.assertEqual(course.files, ["lessons/99_x/k.cpp", "lessons/99_x/k.h", "tests/99_x/t.cpp"])
        self.assertEqual(course.read("lessons/99_x/k.cpp").decode(), self.COURSE)
        self.assertEqual(course.uncommitted, ["lessons/99_x/k.cpp"])
        self.assertIn("uncommitted changes (lessons/99_x/k.cpp)", course.uncommitted_note())
        # A submission without the file, and one whose task 1 is put back (did not
        # compile): both get the committed exercise, never the instructor's solution.
        os.unlink(os.path.join(self.student, "lessons/99_x/k.cpp"))
        checkout = os.path.join(self.tmp, "w")
        submission.sync_clean_copy(course, checkout)
        exercise = submission.fenced_files(course)
        submission.take_fences(course, self.student, checkout, exercise, {})
        self.assertEqual(self.read(checkout, "lessons/99_x/k.cpp"), self.COURSE)
        self.write(self.student, "lessons/99_x/k.cpp", self.COURSE.replace("FAIL();", "broken("))
        submission.take_fences(course, self.student, checkout, exercise,
                               {"lessons/99_x/k.cpp": {"task1", "task2"}})
        self.assertEqual(self.read(checkout, "lessons/99_x/k.cpp"), self.COURSE)
        self.assertFalse(os.path.exists(os.path.join(checkout, "lessons/99_x/untracked.cpp")))

    def test_only_the_lessons_graded_are_reported(self):
        self.write(self.course, "lessons/98_y/m.cpp", self.COURSE)
        self.write(self.course, "common/lib.cpp", "int lib;\n")
        self.git("-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
        self.git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "more")
        course = Course(self.course)
        self.assertEqual(course.uncommitted, [])
        self.assertIsNone(course.uncommitted_note())
        self.assertEqual(submission.graded_lessons(course, ["99"]), ["99_x"])
        with self.assertRaises(grading_usage_error()):
            submission.graded_lessons(course, ["97"])
        # The student handed in lesson 99 only: nothing about lesson 98 or common/ missing.
        exercise = {r: f for r, f in submission.fenced_files(course).items() if r.startswith("lessons/99_x")}
        self.write(self.student, "common/lib.cpp", "int lib = 1;\n")
        notes = submission.compare_rest(course, self.student, exercise, ["99_x"])
        text = "\n".join(notes)
        self.assertNotIn("98_y", text)
        self.assertNotIn("missing", text)
        self.assertIn("edited outside the fences (1, ignored: the course's copy is used): common/lib.cpp", text)


def grading_usage_error():
    from grading import UsageError
    return UsageError


class ReportOrderTest(unittest.TestCase):
    def test_the_code_s_own_error_comes_first(self):
        xml = textwrap.dedent('''\
            <Catch name="t"><Group name="t">
            <TestCase name="c" tags="[x][task1][points:1]" filename="t.cpp" line="5">
              <Info>bias 1</Info>
              <Expression success="false" filename="t.cpp" line="6">
                <Original>{Unknown expression after the reported line}</Original>
                <Expanded>{Unknown expression after the reported line}</Expanded>
                <Exception filename="t.cpp" line="6">TODO(task1): f is not written yet</Exception>
              </Expression>
              <OverallResult success="false" durationInSeconds="0.5"/>
            </TestCase>
            <TestCase name="d" tags="[x][task1][points:1]" filename="t.cpp" line="9">
              <Expression success="false" type="CHECK" filename="t.cpp" line="9">
                <Original>f() == 1</Original><Expanded>f() == 1</Expanded>
                <Exception filename="t.cpp" line="9">TODO(task1): f is not written yet</Exception>
              </Expression>
              <OverallResult success="false" durationInSeconds="0.5"/>
            </TestCase>
            </Group></Catch>''')
        c, d = catch2.parse_catch_xml(xml).cases
        lines = c["output"].splitlines()   # its context (which input), then the error
        self.assertEqual(lines, ["info: bias 1", "error: TODO(task1): f is not written yet",
                                 "t.cpp:6: thrown by the test after this line"])
        self.assertNotIn("Unknown expression", c["output"])
        self.assertEqual(d["output"].splitlines(),
                         ["error: TODO(task1): f is not written yet", "t.cpp:9: thrown inside CHECK( f() == 1 )"])

    def test_context_comes_first_and_identical_failures_collapse(self):
        # A wrong selective-recompute policy: every parameter's bits differ, under a policy.
        params = [f"transformer.h.0.p{i}" for i in range(8)]
        check = ('<Expression success="false" type="CHECK" filename="t.cpp" line="63">'
                 '<Original>same_bits(got[i].second, want[i].second)</Original>'
                 '<Expanded>false</Expanded></Expression>')
        body = "".join(f"<Info>attn in f32, GEMMs in f32</Info><Info>{p}</Info>{check}"
                       for p in params)
        xml = ('<Catch name="t"><Group name="t"><TestCase name="bits" '
               'tags="[x][task3][points:3]"><Section name="a GPT of 2 blocks">'
               '<Info>attn in f32, GEMMs in f32</Info>'
               '<Expression success="false" type="CHECK" filename="t.cpp" line="58">'
               '<Original>loss == want</Original><Expanded>2.5 == 2.25</Expanded></Expression>'
               f'{body}</Section><OverallResult success="false"/></TestCase></Group></Catch>')
        out = catch2.parse_catch_xml(xml).cases[0]["output"]
        lines = out.splitlines()
        self.assertEqual(lines[:3], ["section: a GPT of 2 blocks",
                                     "info: attn in f32, GEMMs in f32",
                                     "t.cpp:58: CHECK( loss == want ) failed with expansion: 2.5 == 2.25"])
        # the shared context is not repeated; the parameter names are listed once each
        self.assertTrue(lines[3].startswith("info: transformer.h.0.p0 | transformer.h.0.p1 | "), lines[3])
        self.assertTrue(lines[3].endswith("(8 values)") or "p7" in lines[3], lines[3])
        self.assertEqual(lines[4], "t.cpp:63: CHECK( same_bits(got[i].second, want[i].second) ) "
                                   "failed with expansion: false (×8)")
        self.assertEqual(len(lines), 5)
        self.assertEqual(out.count("same_bits"), 1)
        # what the table shows (8 lines) holds all of it
        res = reports.LessonResult("99_x", "lessons", [case("bits", "failed", 3, "task3", output=out)])
        table = io.StringIO()
        reports.print_table(res, table)
        self.assertIn("(×8)", table.getvalue())
        self.assertNotIn("more lines", table.getvalue())

    def test_failures_with_other_context_each_show_theirs_and_the_count_is_bounded(self):
        checks = "".join(
            f'<Info>rank {r}</Info><Expression success="false" type="CHECK" filename="t.cpp" '
            f'line="{10 + r}"><Original>a == b</Original><Expanded>{r} == 0</Expanded></Expression>'
            for r in range(catch2.GROUPS_KEPT + 5))
        xml = ('<Catch name="t"><Group name="t"><TestCase name="c" tags="[x][task1][points:1]">'
               f'{checks}<OverallResult success="false"/></TestCase></Group></Catch>')
        lines = catch2.parse_catch_xml(xml).cases[0]["output"].splitlines()
        self.assertEqual(lines[:4], ["info: rank 0", "t.cpp:10: CHECK( a == b ) failed with expansion: 0 == 0",
                                     "info: rank 1", "t.cpp:11: CHECK( a == b ) failed with expansion: 1 == 0"])
        self.assertEqual(len(lines), 2 * catch2.GROUPS_KEPT + 1)
        self.assertEqual(lines[-1], "... and 5 more failed check(s) at 5 other place(s) or "
                                    "with other values")

    def test_checks_of_no_task_are_set_aside(self):
        res = reports.LessonResult("99_x", "lessons", [
            catch2.Case("graded", "[99_x][task1][points:2]", "passed"),
            catch2.Case("a check of no task", "[99_x]", "failed", "why"),
            catch2.Case("99_x (build)", "", "failed", "does not compile")])
        res.set_aside_untagged()
        self.assertEqual([c.name for c in res.cases], ["graded", "99_x (build)"])
        self.assertEqual([c.name for c in res.untagged], ["a check of no task"])
        out = io.StringIO()
        reports.print_table(res, out, submission=True)
        text = out.getvalue()
        self.assertIn("the submission (lessons/99_x)", text)
        self.assertIn("checks of no task (not graded, no points): 0 of 1 passed", text)
        data = reports.results_json([res], "exclude", [])
        self.assertEqual([t["name"] for t in data["tests"]],
                         ["99_x [task1] graded", "99_x [-] 99_x (build)"])

    def test_launch_time_is_shared_by_its_cases(self):
        report = catch2.parse_catch_xml(CANNED_XML)
        run = process.Run(0, "", "", False, 10.0)
        cases = running.Runner._cases_of(report, run, "mpi")
        self.assertAlmostEqual(sum(c.seconds for c in cases), 10.0)

    def test_a_task_that_did_not_compile_says_so(self):
        err = building.CompileError("task1", "lessons/99_x/k.cpp", "k.cpp:3: error: nope")
        err.replaced = True
        cases = [case("todo", "failed", output="error: TODO(task1): f is not written yet\nt.cpp:9: thrown here"),
                 case("wrong", "failed", output="t.cpp:12: CHECK( f() == 1 ) failed"),
                 case("other task", "failed", task="task2", output="error: TODO(task2): g is not written yet")]
        grade.explain_replaced(cases, [err])
        self.assertEqual(cases[0].output, "did not compile: lessons/99_x/k.cpp (task1's code there "
                                          "was graded as the unfinished exercise; the compiler's "
                                          "errors are above)")
        self.assertNotIn("not written yet", cases[0].output)
        self.assertTrue(cases[1].output.startswith("did not compile: lessons/99_x/k.cpp"))
        self.assertIn("CHECK( f() == 1 )", cases[1].output)
        self.assertIn("not written yet", cases[2].output)   # task 2 compiled: its own words
        # A test binary that was not built because its task's code does not compile.
        why = grade.not_built_why("lessons/99_x/test_99_x_task1", [err], False)
        self.assertEqual(why, "did not compile: lessons/99_x/k.cpp (task1's code; the compiler's "
                              "errors are above)")
        self.assertTrue(grade.not_built_why("lessons/99_x/test_99_x_task2", [], False)
                        .startswith("not run: the build failed"))
        self.assertIn("was never built", grade.not_built_why("lessons/99_x/test_99_x", [], True))

    def test_one_task_picks_its_binary(self):
        binaries = ["lessons/06/test_06", "lessons/06/test_06_task1_mpi", "lessons/06/test_06_task3_mpi"]
        self.assertEqual(grade.only_task(binaries, "task3"),
                         [("lessons/06/test_06_task3_mpi", "[task3]")])
        self.assertEqual(grade.only_task(["solutions/06/test_06_mpi"], "task3"),
                         [("solutions/06/test_06_mpi", "[task3]")])
        self.assertEqual(len(grade.only_task(binaries, None)), 3)


# A stand-in for a Catch2 test binary: the flags tools/grade uses, a few canned cases.
FAKE_BINARY = r'''#!/usr/bin/env python3
import os, re, sys, time
from xml.sax.saxutils import quoteattr
CASES = [  # name, tags, behaviour
    ("adds", "[99_fake][task1][points:2]", os.environ.get("FAKE_ADDS", "pass")),
    ("scales", "[99_fake][task2][points:3]", "pass"),
    ("on the gpu", "[99_fake][task2][points:1][gpu]", "pass"),
    ("needs 2 ranks", "[99_fake][task3][points:4]", "fail_np3"),
    ("aborts with 3 ranks", "[99_fake][task4][points:1]", os.environ.get("FAKE_ABORT", "pass")),
    ("after the abort", "[99_fake][task4][points:1]", "pass"),
]
args = sys.argv[1:]
start = os.environ.get("FAKE_START", "")   # what a global constructor does before main
if start == "abort":
    os.abort()
if start == "exit77":
    os._exit(77)
if start == "silent":
    sys.exit(0)
if start == "forge" and "-o" in args:   # every case passed, whatever it was asked
    with open(args[args.index("-o") + 1], "w") as f:
        f.write('<?xml version="1.0"?>\n<Catch name="f"><Group name="f">\n' + "".join(
            f'<TestCase name={quoteattr(n)} tags={quoteattr(t)}><OverallResult success="true"/>'
            '</TestCase>\n' for n, t, _ in CASES) + "</Group></Catch>\n")
    sys.exit(0)
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
def match(name, tags):
    if filt == "*": return True
    if filt.startswith("~"): return filt[1:] not in tags
    if filt.startswith("["): return filt in tags
    names = [n.replace("\\", "") for n in re.split(r"(?<!\\),", filt)]  # a name list
    return name in names
MPI_ONLY = {"needs 2 ranks", "aborts with 3 ranks", "after the abort"}
cases = [c for c in CASES if match(c[0], c[1]) and (mpi or c[0] not in MPI_ONLY)]
if rank != 0:   # like tests/support/mpi_main.cpp: rank 0 alone writes the report
    sys.stdout = open(os.devnull, "w")
    out = os.devnull if out else None
if "--list-test-names-only" in args:
    print("\n".join(c[0] for c in cases)); sys.exit(0)
if "--list-tests" in args:
    print("Matching test cases:")
    for c in cases: print("  " + c[0] + "\n      " + c[1])
    sys.exit(len(cases))
print("some printf noise from the library")
if os.environ.get("FAKE_RANK0_LATE") and size == 3 and any(c[2] == "abort_np3" for c in cases):
    if rank == 0:   # another rank aborts before rank 0 has reported anything
        time.sleep(3)
    else:
        os.abort()
record = os.environ.get("MGPU_GRADE_RECORD")   # the results the cases recorded
value = "1" if "/solutions/" in sys.argv[0] else \
    os.environ.get(f"FAKE_RECORD_RANK{rank}", os.environ.get("FAKE_RECORD", "1"))
if record and "OMPI_COMM_WORLD_RANK" in os.environ:   # one file per rank
    record += f".rank{rank}"
if record and value:
    with open(record, "a") as f:
        f.write("".join(f"{n}\tresult\t0\t1\t {value}\n" for n, _, how in cases if how == "pass"))
stream = open(out, "w") if out else sys.stdout
stream.write('<?xml version="1.0" encoding="UTF-8"?>\n<Catch name="fake">\n <Group name="fake">\n')
failed = 0
for name, tags, how in cases:
    stream.write(f'  <TestCase name={quoteattr(name)} tags={quoteattr(tags)}>\n'); stream.flush()
    if how == "hang":
        time.sleep(600)
    if how == "crash" or (how == "abort_np3" and size == 3):
        os.abort()   # a crash, or an MPI_Abort: the launch ends inside this case
    ok = how == "pass" or (how == "fail_np3" and size != 3)
    failed += not ok
    if how == "todo":   # the unfinished exercise's own error
        stream.write('   <Exception filename="f.cpp" line="3">TODO(task1): adds is not written '
                     'yet (lessons/99_fake/adds.cpp)</Exception>\n')
    if not ok and how != "todo":
        stream.write('   <Expression success="false" type="REQUIRE" filename="f.cpp" line="9">'
                     f'<Original>ok</Original><Expanded>false (world {size})</Expanded></Expression>\n')
    stream.write(f'   <OverallResult success="{str(ok).lower()}"/>\n  </TestCase>\n')
stream.write(" </Group>\n</Catch>\n")
stream.close()
sys.exit(failed)
'''


# What a confined launch can do: its network, its uid, a hidden folder, a world-readable
# folder nobody named (another copy of the course), /var/tmp, file and memory limits.
PROBE = r'''#!/usr/bin/env python3
import os, socket, sys
print("net=" + str(sorted(n for _, n in socket.if_nameindex())).replace(" ", ""))
print("uid=%d" % os.getuid())
for name, path in (("secret", sys.argv[1]), ("other", sys.argv[3])):
    try:
        os.listdir(path); print(name + "=readable")
    except OSError:
        print(name + "=unreadable")
open(sys.argv[2], "w").write("planted")   # /tmp of its own: gone after the launch
try:
    open(sys.argv[4], "w").write("planted")   # /var/tmp: of its own too
    print("vartmp=written")
except OSError:
    print("vartmp=refused")
try:
    with open("/tmp/big", "wb") as f:
        f.write(b"x" * (2 << 20))
        f.flush()
    print("big=written")
except OSError:
    print("big=refused")
try:
    hog = bytearray(1 << 30)
    print("hog=allocated")
except MemoryError:
    print("hog=refused")
'''

# A launch of three processes that each hold 150 MiB (under a per-process limit of 300 MiB,
# over a launch budget of 300 MiB together), then rest.
MEMORY_HOG = r'''#!/usr/bin/env python3
import os, time
n = 150 << 20
for _ in range(2):
    if os.fork() == 0:
        break
held = bytearray(n)
held[::4096] = b"x" * (n // 4096)   # every page touched: resident
time.sleep(20)
'''

# 30 MiB into each of its folder, /tmp and /dev/shm (a disk budget of 64 MiB holds two).
DISK_HOG = r'''#!/usr/bin/env python3
for path in ("here", "/tmp/there", "/dev/shm/shared"):
    try:
        with open(path, "wb") as f:
            f.write(b"x" * (30 << 20))
        print(path, "written")
    except OSError as e:
        print(path, e)
'''


class VerdictsTest(unittest.TestCase):
    """What the grader compares outside the tested process (tools/grading/verdicts.py)."""

    def records(self, lines):
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write("".join("\t".join(line) + "\n" for line in lines))
        try:
            return verdicts.read_records(f.name)
        finally:
            os.unlink(f.name)

    def check(self, theirs, reference):
        return verdicts.differs(self.records(theirs).get("c", {}),
                                self.records(reference).get("c", {}))

    def test_relative_tolerance(self):
        ref = [("c", "max_rel_diff #1", "rel:0.01", "2", " 100 0")]
        self.assertIsNone(self.check([("c", "max_rel_diff #1", "rel:0.01", "2", " 100.9 0.009")], ref))
        self.assertIn("element 0 is 102", self.check(
            [("c", "max_rel_diff #1", "rel:0.01", "2", " 102 0")], ref))

    def test_a_tolerance_is_printed_in_scientific_notation(self):
        ref = [("c", "result", "1e-12", "1", " 1")]
        why = self.check([("c", "result", "1e-12", "1", " 1.5")], ref)
        self.assertIn("(tolerance 1e-12)", why)
        self.assertEqual([verdicts.sci(x) for x in (1e-12, 2.5e-4, 0.05, 0.0)],
                         ["1e-12", "2.5e-04", "5e-02", "0"])

    def test_checked_equalities_match_by_their_left_side(self):
        ref = [("c", "== #1", "text", "1", "{ 5 }")]
        self.assertIsNone(self.check(ref, ref))
        self.assertIn("{ 4 }, where the reference has { 5 }",
                      self.check([("c", "== #1", "text", "1", "{ 4 }")], ref))
        self.assertIn("recorded no result", self.check([], ref))

    def test_an_equality_rewritten_to_agree_with_itself_fails(self):
        # A process that rewrites its record file at exit ("4 == 5" made "5 == 5") has no
        # expected side to copy: the file holds the left side only, compared with the
        # reference's.
        ref = [("c", "== #1", "text", "1", "5"), ("c", "== #2", "approx", "1", "0.75")]
        forged = [("c", "== #1", "text", "1", "5 == 5"), ("c", "== #2", "text", "1", "0.75 == Approx( 0.75 )")]
        self.assertIsNotNone(self.check(forged, ref))
        self.assertIsNotNone(self.check([forged[0], ref[1]], ref))
        self.assertIsNotNone(self.check([ref[0], forged[1]], ref))
        # a left side that differs from the reference's fails, whatever the right side was
        self.assertIsNotNone(self.check([("c", "== #1", "text", "1", "2048"), ref[1]],
                                        [("c", "== #1", "text", "1", "1024"), ref[1]]))

    def test_texts_that_may_differ_between_correct_programs_are_not_compared(self):
        for text in ("\"/tmp/x\"", "0x7ffd"):
            with self.subTest(text=text):
                self.assertIsNone(self.check([("c", "== #1", "text", "1", "anything")],
                                             [("c", "== #1", "text", "1", text)]))

    def test_fractional_numbers_in_a_text_are_compared_as_numbers(self):
        ref = [("c", "== #1", "text", "1", "{ 6.5, 0.5, 3 }")]
        self.assertIsNone(self.check([("c", "== #1", "text", "1", "{ 6.5000001, 0.5, 3 }")], ref))
        self.assertIsNotNone(self.check([("c", "== #1", "text", "1", "{ 9.5, 0.5, 3 }")], ref))
        self.assertIsNotNone(self.check([("c", "== #1", "text", "1", "{ 6.5, 0.5 }")], ref))
        self.assertIsNotNone(self.check([("c", "== #1", "text", "1", "anything")], ref))

    def test_approx_is_compared_as_a_number_near_the_reference_s(self):
        ref = [("c", "== #1", "approx", "1", "0.75")]
        self.assertIsNone(self.check([("c", "== #1", "approx", "1", "0.7500001")], ref))
        self.assertIsNotNone(self.check([("c", "== #1", "approx", "1", "2.5")], ref))
        self.assertIsNotNone(self.check([("c", "== #1", "approx", "1", "true")], ref))
        self.assertIsNotNone(self.check([("c", "== #1", "text", "1", "0.75")], ref))

    def test_every_lesson_run_by_the_course_s_runners_is_checked(self):
        # The runners (tests/support) record every case's outcome and equalities: a lesson
        # whose own tests record nothing is checked all the same.
        folder = tempfile.mkdtemp()
        try:
            os.makedirs(os.path.join(folder, "tests", "99_fake"))
            source = os.path.join(folder, "tests", "99_fake", "test_fake.cpp")
            with open(source, "w") as f:
                f.write("TEST_CASE(\"x\") { CHECK(1 == 1); }\n")
            self.assertFalse(verdicts.records_in_sources([source]))
            os.makedirs(os.path.join(folder, "tests", "support"))
            open(os.path.join(folder, "tests", "support", "grade_listener.h"), "w").close()
            self.assertTrue(verdicts.records_in_sources([source]))
        finally:
            shutil.rmtree(folder)

    def test_rank_files_are_read_with_their_rank(self):
        folder = tempfile.mkdtemp()
        try:
            for name, value in (("record.txt.rank0", "1"), ("record.txt.rank1", "2")):
                with open(os.path.join(folder, name), "w") as f:
                    f.write(f"c\tresult\t0\t1\t {value}\n")
            os.symlink("/etc/passwd", os.path.join(folder, "record.txt.rank2"))
            got = verdicts.read_launch_records(os.path.join(folder, "record.txt"))
            self.assertEqual(sorted(got["c"]), ["rank 0: result", "rank 1: result"])
        finally:
            shutil.rmtree(folder)


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
        self.assertIn("SKIPPED on the gpu [task2]", out)
        self.assertIn("GPU: 1 test(s), 1 point(s), not run here: no CUDA GPU is visible (fake). "
                      "They are not graded (--gpu-policy exclude).", out)
        self.assertIn("GPU policy: exclude", out.splitlines()[1])
        with open(results) as f:
            data = json.load(f)
        self.assertEqual(data["score"], 5)
        self.assertEqual(sum(t["max_score"] for t in data["tests"]), 5)
        self.assertEqual({t["status"] for t in data["tests"]}, {"passed"})
        self.assertEqual([(t["lesson"], t["task"], t["score"], t["max_score"], t["passed"],
                           t["failed"], t["skipped"]) for t in data["extra_data"]["tasks"]],
                         [("99_fake", "task1", 2, 2, 1, 0, 0), ("99_fake", "task2", 3, 3, 1, 0, 1)])
        self.assertEqual({t["extra_data"]["task"] for t in data["tests"]}, {"task1", "task2"})

    def test_a_build_dir_given_as_a_link_is_followed(self):
        link = self.tmp + "-link"
        os.symlink(self.tmp, link)
        try:
            rc, out = self.grade("--reference", "--build-dir", link, "99")
        finally:
            os.unlink(link)
        self.assertEqual(rc, 0, out)
        self.assertNotIn("no graded tests yet", out)
        self.assertEqual(out.strip().splitlines()[-1], "2 passed, 0 failed, 1 skipped")

    def test_gpu_policy_fail(self):
        rc, out = self.grade("--reference", "--gpu-policy", "fail", "99")
        self.assertEqual(rc, 1)
        self.assertIn("score: 5/6 points", out)
        self.assertEqual(out.strip().splitlines()[-1], "2 passed, 1 failed")

    def test_a_task_put_back_to_the_exercise_reports_its_compile_error(self):
        # What a submission whose task 1 does not compile is graded with: task 1's fences
        # were put back to the exercise, whose test fails with "not written yet".
        err = building.CompileError("task1", "lessons/99_fake/adds.cpp", "adds.cpp:3: error: expected ';'")
        err.replaced = True
        real = grade.grade
        grade.grade = lambda args, root: real(args, root, replaced={("lessons", "99_fake"): [err]})
        results = os.path.join(self.tmp, "results.json")
        try:
            rc, out = self.grade("99", "--results-json", results, env={"FAKE_ADDS": "todo"})
        finally:
            grade.grade = real
        self.assertEqual(rc, 1)
        self.assertIn("FAILED  adds [task1]\n      did not compile: lessons/99_fake/adds.cpp "
                      "(task1's code there was graded as the unfinished exercise", out)
        self.assertNotIn("not written yet", out)
        with open(results) as f:
            data = json.load(f)
        adds = [t for t in data["tests"] if t["name"].endswith("adds")][0]
        self.assertTrue(adds["output"].startswith("did not compile: lessons/99_fake/adds.cpp"))
        self.assertIn("does not compile: lessons/99_fake/adds.cpp", data["output"])

    def test_failure_scores_zero_for_its_case(self):
        rc, out = self.grade("99_fake", env={"FAKE_ADDS": "fail"})
        self.assertEqual(rc, 1)
        self.assertIn("FAILED  adds [task1]", out)
        self.assertIn("score: 3/5 points", out)
        self.assertEqual(out.strip().splitlines()[-1], "1 passed, 1 failed, 1 skipped")

    def test_a_crash_fails_its_case_alone(self):
        rc, out = self.grade("99", env={"FAKE_ADDS": "crash"})
        self.assertEqual(rc, 1)
        self.assertIn("crashed (SIGABRT)", out)
        self.assertIn("score: 3/5 points", out)   # the case after the crash still counts
        self.assertEqual(out.strip().splitlines()[-1], "1 passed, 1 failed, 1 skipped")

    def test_a_hang_is_killed_by_the_timeout_and_costs_its_case_alone(self):
        rc, out = self.grade("--timeout", "6", "99", env={"FAKE_ADDS": "hang"})
        self.assertEqual(rc, 1)
        self.assertIn("timed out after 6 s", out)
        self.assertEqual(out.strip().splitlines()[-1], "1 passed, 1 failed, 1 skipped")

    def test_timeout_0_means_no_limit(self):
        rc, out = self.grade("--reference", "--timeout", "0", "99")
        self.assertEqual(rc, 0, out)
        self.assertEqual(out.strip().splitlines()[-1], "2 passed, 0 failed, 1 skipped")

    def test_check_exercise_names_a_test_that_cannot_fail(self):
        rc, out = self.grade("--check-exercise")
        self.assertEqual(rc, 1)
        self.assertIn("passes on the unmodified exercise", out)
        self.assertEqual(out.strip().splitlines()[-1], "0 passed, 2 failed, 1 skipped")

    def test_nothing_graded_is_not_a_pass(self):
        empty = tempfile.mkdtemp(prefix="mgpu-grade-empty-")
        try:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                rc = grade.main(["--no-build", "--build-dir", empty])
        finally:
            shutil.rmtree(empty)
        self.assertEqual(rc, 1)
        self.assertIn("nothing was graded", out.getvalue())
        self.assertEqual(out.getvalue().strip().splitlines()[-1], "0 passed, 1 failed")

    def usage_error(self, *argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = grade.main(list(argv))
        self.assertEqual(rc, 2, out.getvalue())
        self.assertEqual(out.getvalue(), "")          # nothing graded first
        self.assertEqual(len(err.getvalue().strip().splitlines()), 1)
        return err.getvalue()

    def test_usage_errors_are_one_line_before_any_grading(self):
        missing = os.path.join(self.tmp, "no-such-build")
        self.assertIn("no build folder", self.usage_error("--no-build", "--build-dir", missing))
        self.assertIn("cannot write", self.usage_error(
            "--no-build", "--build-dir", self.tmp, "--junit", "/no/such/folder/r.xml"))
        self.assertIn("cannot write", self.usage_error(
            "--no-build", "--build-dir", self.tmp, "--results-json", self.tmp))
        self.assertIn("--timeout", self.usage_error("--timeout", "-1"))
        self.assertIn("no lesson matches", self.usage_error("--no-build", "--build-dir", self.tmp, "42"))

    def test_the_configured_build_folder_is_picked(self):
        root = tempfile.mkdtemp(prefix="mgpu-grade-root-")
        try:
            for name in ("build-cpu", "other"):
                os.makedirs(os.path.join(root, name, "meson-info"))
                open(os.path.join(root, name, "build.ninja"), "w").close()
            path, note = grade.pick_build_dir(root, None)
            self.assertEqual(os.path.basename(path), "other")   # newest
            self.assertIn("--build-dir picks another", note)
            self.assertEqual(grade.pick_build_dir(root, "x")[0], os.path.join(root, "x"))
            os.makedirs(os.path.join(root, "build", "meson-info"))
            open(os.path.join(root, "build", "build.ninja"), "w").close()
            self.assertEqual(grade.pick_build_dir(root, None), (os.path.join(root, "build"), None))
        finally:
            shutil.rmtree(root)

    @unittest.skipUnless(shutil.which("mpirun"), "mpirun not installed")
    def with_sources(self):
        """Meson's introspection of the fake binaries, with a test source that has the
        cases of the non-MPI binary: what the grader expects, whatever the binary says."""
        src = os.path.join(self.tmp, "test_fake.cpp")
        with open(src, "w") as f:
            f.write('TEST_CASE("adds", "[99_fake][task1][points:2]") {}\n'
                    'TEST_CASE("scales", "[99_fake][task2][points:3]") {}\n'
                    'TEST_CASE("on the gpu", "[99_fake][task2][points:1][gpu]") {}\n')
        os.makedirs(os.path.join(self.tmp, "meson-info"))
        targets = [{"name": "test_99_fake", "type": "executable",
                    "filename": [os.path.join(self.tmp, v, "99_fake", "test_99_fake")],
                    "target_sources": [{"sources": [src]}]} for v in ("lessons", "solutions")]
        with open(os.path.join(self.tmp, "meson-info", "intro-targets.json"), "w") as f:
            json.dump(targets, f)

    def test_a_binary_that_fails_before_its_first_case_scores_zero_of_the_full_maximum(self):
        self.with_sources()
        for start, policy, score in (("abort", "exclude", "0/6"), ("abort", "fail", "0/6"),
                                     ("silent", "exclude", "0/6"), ("silent", "fail", "0/6"),
                                     ("exit77", "exclude", "0/5"), ("exit77", "fail", "0/6")):
            with self.subTest(start=start, policy=policy):
                rc, out = self.grade("--reference", "--gpu-policy", policy, "99",
                                     env={"FAKE_START": start})
                self.assertEqual(rc, 1, out)
                self.assertIn(f"score: {score} points", out)
        rc, out = self.grade("--reference", "99")   # the honest binary: unchanged
        self.assertEqual(rc, 0, out)
        self.assertIn("score: 5/5 points", out)

    def test_a_forged_report_earns_nothing(self):
        expected = [("adds", "[99_fake][task1][points:2]"), ("scales", "[99_fake][task2][points:3]"),
                    ("on the gpu", "[99_fake][task2][points:1][gpu]")]
        exe = os.path.join(self.tmp, "lessons", "99_fake", "test_99_fake")
        old = dict(os.environ)
        try:
            for start, decoy in (("forge", True), ("", True), ("forge", False)):
                os.environ["FAKE_START"] = start
                runner = running.Runner(30, self.tmp, self.tmp, decoy=decoy)
                cases = runner.run_binary(exe, "", expected)
                got = sorted((c.name, c.status) for c in cases)
                with self.subTest(start=start, decoy=decoy):
                    if start and decoy:   # found out: every case fails, and says why
                        self.assertEqual(got, [("adds", "failed"), ("on the gpu", "failed"),
                                               ("scales", "failed")])
                        self.assertIn("cannot be trusted", cases[0].output)
                    elif start:   # no decoy: the sources still bound what it earns
                        self.assertIn(("adds", "passed"), got)
                        self.assertIn(("99_fake (cases not in its sources)"
                                       .replace("99_fake", "test_99_fake"), "failed"), got)
                    else:         # an honest binary: the decoy changes nothing
                        self.assertEqual(got, [("adds", "passed"), ("on the gpu", "skipped"),
                                               ("scales", "passed")])
        finally:
            os.environ.clear()
            os.environ.update(old)

    def test_results_are_checked_outside_the_tested_process(self):
        """A binary that reports exactly the cases asked for as passed (as Catch2 would)
        earns nothing unless its recorded results match the reference build's."""
        expected = [("adds", "[99_fake][task1][points:2]"), ("scales", "[99_fake][task2][points:3]")]
        exe = os.path.join(self.tmp, "lessons", "99_fake", "test_99_fake")
        ref = os.path.join(self.tmp, "solutions", "99_fake", "test_99_fake")
        old = dict(os.environ)
        try:
            for value, status in (("1", "passed"), ("2", "failed"), ("", "failed")):
                os.environ["FAKE_RECORD"] = value
                runner = running.Runner(30, self.tmp, self.tmp, decoy=True)
                runner.checked[exe] = ref
                cases = [c for c in runner.run_binary(exe, "", expected) if not c.gpu]
                with self.subTest(recorded=value):
                    self.assertEqual([c.status for c in cases], [status, status])
                    if value == "2":
                        self.assertIn("element 0 is 2, the reference computes 1", cases[0].output)
                    if not value:
                        self.assertIn("recorded no result for 'result'", cases[0].output)
        finally:
            os.environ.clear()
            os.environ.update(old)

    @unittest.skipUnless(shutil.which("mpirun"), "mpirun not installed")
    def test_multi_rank_results_are_checked_rank_by_rank(self):
        """Each rank of an MPI launch records its own results; the reference build runs
        with as many ranks; one rank's wrong result fails the case."""
        expected = [("adds", "[99_fake][task1][points:2]"), ("scales", "[99_fake][task2][points:3]")]
        self.fake("lessons", "test_99_fake_mpi")
        self.fake("solutions", "test_99_fake_mpi")
        exe = os.path.join(self.tmp, "lessons", "99_fake", "test_99_fake_mpi")
        ref = os.path.join(self.tmp, "solutions", "99_fake", "test_99_fake_mpi")
        old = dict(os.environ)
        try:
            for env, status in (({}, "passed"), ({"FAKE_RECORD_RANK1": "2"}, "failed"),
                                ({"FAKE_RECORD": ""}, "failed")):
                os.environ.update(env)
                runner = running.Runner(60, self.tmp, os.path.dirname(HERE), decoy=True)
                runner.checked[exe] = ref
                cases = [c for c in runner.run_mpi_binary(exe, "", expected) if c.name in ("adds", "scales")]
                with self.subTest(env=env):
                    self.assertEqual([c.status for c in cases], [status, status], cases[0].output)
                    if env.get("FAKE_RECORD_RANK1"):
                        self.assertIn("'rank 1: result': element 0 is 2", cases[0].output)
                os.environ.clear()
                os.environ.update(old)
        finally:
            os.environ.clear()
            os.environ.update(old)

    def script(self, name, text):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o755)
        return path

    def test_a_submission_s_tests_run_confined_where_possible(self):
        secret = os.path.join(self.tmp, "solutions")
        with open(os.path.join(secret, "answer.txt"), "w") as f:
            f.write("42")
        conf = confine.Confinement(hidden=[secret], memory_mb=512, file_mb=1)
        if not conf.active:
            self.skipTest(conf.note)
        # Another copy of the course's solutions, world-readable, that nobody named, and a
        # file the launch writes to /var/tmp (which outlives a grade on the machine).
        other = tempfile.mkdtemp(prefix="mgpu-grade-test-other-", dir="/var/tmp")
        os.chmod(other, 0o755)
        vartmp = f"/var/tmp/mgpu-grade-test-planted-{os.getpid()}"
        probe = self.script("probe", PROBE)
        leftover = "/tmp/mgpu-grade-test-planted"
        try:
            with confine.Launch(conf) as launch:
                r = running.run(launch.command([probe, secret, leftover, other, vartmp], [probe]),
                                60, conf.env(dict(os.environ)))
        finally:
            planted = [p for p in (leftover, vartmp) if os.path.exists(p)]
            for p in planted:
                os.unlink(p)
            shutil.rmtree(other)
        self.assertEqual(r.rc, 0, r.stderr)
        got = dict(line.split("=", 1) for line in r.stdout.split())
        self.assertEqual(got["net"], "['lo']")
        # uid 65534 where the grader is root; else the grading user, root of its namespace
        self.assertEqual(got["uid"], "65534" if os.geteuid() == 0 else "0")
        self.assertEqual(got["secret"], "unreadable")
        self.assertEqual(got["other"], "unreadable", "a folder outside the allow-list was seen")
        self.assertEqual(got["vartmp"], "written")   # into the launch's own /var/tmp
        self.assertEqual(got["big"], "refused")
        self.assertEqual(got["hog"], "refused")
        self.assertFalse(planted, "a file the launch wrote to /tmp or /var/tmp outlived it")

    def confined_run(self, conf, text, timeout=60):
        """Runs the script `text` as a confined launch of conf, as running.Runner does."""
        if not conf.active:
            self.skipTest(conf.note)
        path = self.script("hog", text)
        with confine.Launch(conf) as launch:
            r = running.run(launch.command([path], [path]), timeout,
                            conf.env(dict(os.environ)), watch=conf.watch())
        return conf.over_budget(r)

    def test_the_header_names_the_launch_budgets(self):
        conf = confine.Confinement(memory_mb=100, file_mb=5, disk_mb=50)
        if not conf.active:
            self.skipTest(conf.note)
        for words in ("in a root of their own", "memory 100 MiB", "disk 50 MiB", "files 5 MiB"):
            self.assertIn(words, conf.note)

    def test_a_launch_over_its_memory_budget_is_killed(self):
        conf = confine.Confinement(memory_mb=300, file_mb=1)
        r = self.confined_run(conf, MEMORY_HOG)
        self.assertLess(r.seconds, 15, r.stdout + r.stderr)
        self.assertEqual(r.why_incomplete(300), "memory budget of 300 MiB exceeded (all the "
                         "launch's processes together; tools/grade --memory-limit sets it); "
                         "the run was killed")

    def test_a_launch_over_its_disk_budget_fails(self):
        conf = confine.Confinement(memory_mb=0, file_mb=100, disk_mb=64)
        r = self.confined_run(conf, DISK_HOG)
        self.assertLess(r.rc, 0, r.stdout + r.stderr)
        self.assertTrue(r.why_incomplete(300).startswith(
            "disk budget of 64 MiB exceeded (the launch's files, /tmp and /dev/shm in all; "
            "tools/grade --disk-limit sets it)"), r.why_incomplete(300))
        self.assertIn("/dev/shm/shared [Errno 28] No space left on device", r.stdout)

    def test_a_submission_s_time_budget_stops_its_launches(self):
        os.environ["FAKE_ADDS"] = "hang"
        try:
            runner = running.Runner(60, self.tmp, os.path.dirname(HERE), budget=3)
        finally:
            del os.environ["FAKE_ADDS"]
        exe = os.path.join(self.tmp, "lessons", "99_fake", "test_99_fake")
        expected = [("adds", "[99_fake][task1][points:2]"), ("scales", "[99_fake][task2][points:3]"),
                    ("on the gpu", "[99_fake][task2][points:1][gpu]")]
        cases = {c.name: c for c in runner.run_binary(exe, "", expected)}
        self.assertLess(runner.budget.spent, 10)
        self.assertEqual({c.status for c in cases.values()}, {"failed"})
        spent = ("the submission time budget of 3 s was spent (all its test launches together; "
                 "tools/grade --submission-budget sets it)")
        self.assertTrue(cases["adds"].output.startswith(spent + "; the run was killed"),
                        cases["adds"].output)
        for name in ("scales", "on the gpu"):
            self.assertTrue(cases[name].output.startswith(spent + " before this test case began"),
                            cases[name].output)

    def test_mpi_case_must_pass_with_2_and_3_ranks(self):
        self.fake("solutions", "test_99_fake_mpi")
        rc, out = self.grade("--reference", "99")
        self.assertEqual(rc, 1, out)
        self.assertIn("FAILED  needs 2 ranks [task3] (mpi)", out)
        self.assertIn("-np 3: failed", out)
        # cpu: adds, scales; mpi: adds, scales, aborts.., after..; needs 2 ranks fails
        self.assertEqual(out.strip().splitlines()[-1], "6 passed, 1 failed, 2 skipped")

    @unittest.skipUnless(shutil.which("mpirun"), "mpirun not installed")
    def test_an_mpi_abort_fails_its_case_alone(self):
        self.fake("solutions", "test_99_fake_mpi")
        rc, out = self.grade("--reference", "99", env={"FAKE_ABORT": "abort_np3"})
        self.assertEqual(rc, 1, out)
        self.assertIn("FAILED  aborts with 3 ranks [task4] (mpi)", out)
        self.assertNotIn("FAILED  after the abort", out)
        self.assertEqual(out.strip().splitlines()[-1], "5 passed, 2 failed, 2 skipped")

    @unittest.skipUnless(shutil.which("mpirun"), "mpirun not installed")
    def test_an_abort_before_rank_0_reports_runs_the_cases_alone(self):
        self.fake("solutions", "test_99_fake_mpi")
        rc, out = self.grade("--reference", "99",
                             env={"FAKE_ABORT": "abort_np3", "FAKE_RANK0_LATE": "1"})
        self.assertEqual(rc, 1, out)
        self.assertIn("FAILED  aborts with 3 ranks [task4] (mpi)", out)
        self.assertIn("before this test case began", out)
        self.assertNotIn("FAILED  adds", out)
        self.assertNotIn("FAILED  after the abort", out)
        self.assertEqual(out.strip().splitlines()[-1], "5 passed, 2 failed, 2 skipped")


if __name__ == "__main__":
    unittest.main(verbosity=2)
