"""What a grade prints and writes: the points table per lesson and task, the GPU policy,
JUnit XML, and Gradescope's results.json."""
import re
import sys
import xml.etree.ElementTree as ET

from .catch2 import Case

GPU_POLICIES = {
    "exclude": "GPU tests that cannot run here (no GPU, or no CUDA in this build) are left "
               "out of the score and its maximum",
    "fail": "GPU tests that cannot run here score 0: the maximum is the same on every machine",
}


class LessonResult:
    """One lesson graded in one variant. compile_errors: CompileErrors of its build;
    blocked: its test binaries did not build, so no case ran; notes: lines for the table."""

    def __init__(self, lesson, variant, cases, compile_errors=(), blocked=False, notes=()):
        self.lesson, self.variant, self.cases = lesson, variant, list(cases)
        self.compile_errors, self.blocked, self.notes = list(compile_errors), blocked, list(notes)
        self.untagged = []

    def set_aside_untagged(self):
        """Moves the test cases that belong to no task (no [taskK] tag: worth no points)
        out of the graded cases: they are shown apart and are in no score, count, exit
        status or report file. What the grader made up to report a failure (a build that
        failed, a run that ended badly) has no tags and stays graded."""
        self.untagged = [c for c in self.cases if c.task == "-" and c.tags.strip()]
        self.cases = [c for c in self.cases if not (c.task == "-" and c.tags.strip())]


def apply_gpu_policy(results, policy):
    """Under 'fail' a skipped GPU case is a failed one, everywhere: table, files, exit."""
    if policy != "fail":
        return
    for res in results:
        for c in res.cases:
            if c.status == "skipped":
                c.status = "failed"
                c.output = f"not run: {c.output or 'skipped'} (counted as failed: --gpu-policy fail)"


def task_sort_key(task):
    m = re.fullmatch(r"task(\d+)", task)
    return (0, int(m.group(1))) if m else (1, 0)


def fmt_points(p):
    return f"{p:g}" if isinstance(p, float) else str(p)


def first_lines(text, n=6, indent="      "):
    lines = text.strip().splitlines()
    more = f"\n{indent}... ({len(lines) - n} more lines)" if len(lines) > n else ""
    return "\n".join(indent + ln for ln in lines[:n]) + more


def print_compile_errors(res, out):
    by_task = {}
    for e in res.compile_errors:
        by_task.setdefault(e.task, []).append(e)
    what = ("does not compile; none of its tests could run" if res.blocked else
            "has code that does not compile (the tests that could run, ran)")
    if all(e.replaced for e in res.compile_errors):
        what = ("has code that does not compile; each such task was graded with the "
                "unfinished exercise in its place")
    print(f"  {res.variant}/{res.lesson} {what}:", file=out)
    for task in sorted(by_task, key=task_sort_key):
        errors = by_task[task]
        label = f"{task}:" if task != "-" else "outside the fences:"
        print(f"  {label} {errors[0].where}", file=out)
        print(first_lines(errors[0].text, 12, "      "), file=out)
        if len(errors) > 1:
            print(f"      (and {len(errors) - 1} more failed build step(s) with errors here)",
                  file=out)


def print_table(res, out=None, submission=False):
    out = out or sys.stdout
    cases = res.cases
    who = ("reference" if res.variant == "solutions" else
           "the submission" if submission else "your code")
    print(f"\n{res.lesson} — {who} ({res.variant}/{res.lesson})", file=out)
    if res.compile_errors:
        print_compile_errors(res, out)
    print(f"  {'task':<8}{'tests passed':>14}{'points':>12}", file=out)
    tasks = sorted({c.task for c in cases}, key=task_sort_key)
    for task in tasks + ["total"]:
        sel = [c for c in cases if task == "total" or c.task == task]
        ran = [c for c in sel if c.status != "skipped"]
        skipped = [c for c in sel if c.status == "skipped"]
        passed = sum(c.status == "passed" for c in ran)
        earned = sum(c.score for c in ran)
        possible = sum(c.points for c in ran)
        extra = (f"   ({len(skipped)} skipped, {fmt_points(sum(c.points for c in skipped))} pts)"
                 if skipped else "")
        print(f"  {task:<8}{f'{passed}/{len(ran)}':>14}"
              f"{f'{fmt_points(earned)}/{fmt_points(possible)}':>12}{extra}", file=out)
    for note in res.notes:
        print(f"  {note}", file=out)
    if res.blocked:
        why = ("does not compile (errors above)" if res.compile_errors else
               "was not built")
        print(f"  FAILED  {len(cases)} test(s) not run: {res.variant}/{res.lesson} {why}",
              file=out)
        return
    for c in cases:
        if c.status == "failed":
            print(f"  FAILED  {c.name} [{c.task}]{' (mpi)' if c.kind == 'mpi' else ''}", file=out)
            if c.output:
                print(first_lines(c.output, 8), file=out)
        elif c.status == "skipped":   # why: the GPU note above
            print(f"  SKIPPED {c.name} [{c.task}]{' (mpi)' if c.kind == 'mpi' else ''}", file=out)
    print_untagged(res, out)


def print_untagged(res, out):
    """The checks of no task: one line, and the ones that failed, for information only."""
    if not res.untagged:
        return
    bad = [c for c in res.untagged if c.status == "failed"]
    print(f"  checks of no task (not graded, no points): "
          f"{sum(c.status == 'passed' for c in res.untagged)} of {len(res.untagged)} passed", file=out)
    for c in bad:
        print(f"  note    {c.name}{' (mpi)' if c.kind == 'mpi' else ''}", file=out)
        if c.output:
            print(first_lines(c.output, 3), file=out)


def summary_line(passed, failed, skipped):
    line = f"{passed} passed, {failed} failed"
    return line + (f", {skipped} skipped" if skipped else "")


def test_id(res, c):
    kind = " (mpi, 2 and 3 ranks)" if c.kind == "mpi" else ""
    return f"{res.lesson} [{c.task}] {c.name}{kind}"


def task_subtotals(results):
    """One dict per lesson and task, in the tables' order: lesson, task, score, max_score
    (the points of the tests that ran, as in the table), passed, failed, skipped."""
    out = []
    for res in results:
        for task in sorted({c.task for c in res.cases}, key=task_sort_key):
            sel = [c for c in res.cases if c.task == task]
            ran = [c for c in sel if c.status != "skipped"]
            out.append({"lesson": res.lesson, "task": task,
                        "score": sum(c.score for c in ran),
                        "max_score": sum(c.points for c in ran),
                        "passed": sum(c.status == "passed" for c in sel),
                        "failed": sum(c.status == "failed" for c in sel),
                        "skipped": sum(c.status == "skipped" for c in sel)})
    return out


def results_json(results, policy, header, seconds=0):
    """Gradescope's results.json: every test 'passed' or 'failed' with score and
    max_score; what was not graded (skipped GPU tests under 'exclude') is named in the
    top-level output, never reported as a pass. Each test carries its lesson and task
    (its `tags` and `extra_data`, fields of Gradescope's format); the top-level extra_data
    has each task's subtotal (`tasks`, see task_subtotals) and the maximum score;
    execution_time: seconds, the whole grade's wall time (seconds: as measured)."""
    tests, score, not_graded = [], 0, []
    for res in results:
        for c in res.cases:
            if c.status == "skipped":
                not_graded.append(f"{test_id(res, c)}: {c.output.splitlines()[0] if c.output else ''}")
                continue
            score += c.score
            tests.append({"name": test_id(res, c), "score": c.score, "max_score": c.points,
                          "status": "passed" if c.status == "passed" else "failed",
                          "output": c.output, "tags": [res.lesson, c.task],
                          "extra_data": {"lesson": res.lesson, "task": c.task}})
    output = list(header)
    if not_graded:
        output.append(f"Not graded ({len(not_graded)} GPU test(s) that could not run here, "
                      f"--gpu-policy {policy}):")
        output += [f"  {line}" for line in not_graded]
    for res in results:
        for e in res.compile_errors:
            output.append(f"{res.variant}/{res.lesson} [{e.task}] does not compile: {e.where}\n{e.text}")
    return {"score": score, "execution_time": round(seconds), "output": "\n".join(output),
            "tests": tests,
            "extra_data": {"gpu_policy": policy, "not_graded": len(not_graded),
                           "max_score": sum(t["max_score"] for t in tests),
                           "tasks": task_subtotals(results)}}


def junit_xml(results):
    suites = ET.Element("testsuites")
    for res in results:
        s = ET.SubElement(suites, "testsuite", name=f"{res.variant}/{res.lesson}",
                          tests=str(len(res.cases)),
                          failures=str(sum(c.status == "failed" for c in res.cases)),
                          skipped=str(sum(c.status == "skipped" for c in res.cases)),
                          time=f"{sum(c.seconds for c in res.cases):.3f}")
        for c in res.cases:
            tc = ET.SubElement(s, "testcase", classname=f"{res.lesson}.{c.task}",
                               name=test_id(res, c), time=f"{c.seconds:.3f}")
            props = ET.SubElement(tc, "properties")
            ET.SubElement(props, "property", name="points", value=str(c.points))
            if c.status == "failed":
                msg = c.output.strip().splitlines()[0] if c.output.strip() else "failed"
                ET.SubElement(tc, "failure", message=msg).text = c.output
            elif c.status == "skipped":
                ET.SubElement(tc, "skipped", message=c.output.strip()[:200])
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def check_exercise(learner, reference):
    """Graded cases must fail on the exercise and pass on the reference; every other case
    must pass on the reference. Returns a LessonResult of the check's own verdicts."""
    lcases = {c.key(): c for c in learner.cases}
    verdicts = []
    for ref in reference.cases:
        mine = lcases.get(ref.key())
        if ref.status == "skipped" or (mine is not None and mine.status == "skipped"):
            verdicts.append(Case(ref.name, ref.tags, "skipped", ref.output, kind=ref.kind))
            continue
        problems = []
        if ref.status != "passed":
            problems.append("fails on the reference (solutions/):\n" + ref.output)
        if ref.graded:
            if learner.blocked:
                problems.append("the unmodified exercise (lessons/) does not compile")
            elif mine is None:
                problems.append("not run on the exercise (lessons/): the test binaries differ")
            elif mine.status == "passed":
                problems.append("passes on the unmodified exercise (lessons/): it cannot tell "
                                "a finished task from an unfinished one")
        verdicts.append(Case(ref.name, ref.tags, "failed" if problems else "passed",
                             "\n".join(problems), ref.seconds, ref.kind))
    if learner.compile_errors:   # a kernel check of the exercise failing is an offence too
        for e in learner.compile_errors:
            verdicts.append(Case(f"lessons/{learner.lesson} compiles", "", "failed",
                                 f"{e.where}\n{e.text}"))
    return LessonResult(reference.lesson, "check", verdicts)
