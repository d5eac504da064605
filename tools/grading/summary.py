"""A class's grades in one table: the results.json files of `tools/grade --results-json`
(one per student, as docs/instructors.md's batch loop writes them: grades/NAME.json) read,
checked and summed per lesson and task; printed as a student × task table and written as
two CSV files (tools/class_summary)."""
import csv
import json
import math
import os
import re

from .reports import fmt_points, task_sort_key

RESULTS_LIMIT = 64 << 20                   # bytes of a results file read, as grade's reports
TEST_NAME = re.compile(r"^(\S+) \[([^\]]+)\] ")   # reports.test_id: "LESSON [TASK] name"
SIDE_FILES = (".txt", ".xml")             # what the batch loop writes beside NAME.json


class BadResults(Exception):
    """A results file that cannot be summed: its path and what is wrong, in words."""

    def __init__(self, path, why):
        super().__init__(f"{path}: {why}")
        self.path, self.why = path, why


class Student:
    """One student's grade. tasks: {(lesson, task): {"score", "max_score", "passed",
    "failed", "skipped"}}; totals over them; policy: the grade's --gpu-policy."""

    def __init__(self, name, path, tasks, policy):
        self.name, self.path, self.tasks, self.policy = name, path, tasks, policy
        self.score = sum(t["score"] for t in tasks.values())
        self.max_score = sum(t["max_score"] for t in tasks.values())
        self.passed = sum(t["passed"] for t in tasks.values())
        self.failed = sum(t["failed"] for t in tasks.values())
        self.skipped = sum(t["skipped"] for t in tasks.values())


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def read_results(path, name=None):
    """The Student of one results.json; BadResults naming what is wrong with it."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            raw = f.read(RESULTS_LIMIT + 1)
    except OSError as e:
        raise BadResults(path, f"cannot be read: {e.strerror}") from None
    if len(raw) > RESULTS_LIMIT:
        raise BadResults(path, f"{size} bytes, over the limit of {RESULTS_LIMIT}: not a "
                               "results file of tools/grade")
    if not raw.strip():
        raise BadResults(path, "is empty (the grade did not finish writing it?)")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise BadResults(path, f"is not UTF-8 text (byte {e.start})") from None
    except json.JSONDecodeError as e:
        cut = " (it ends early: the grade did not finish writing it?)" \
            if e.pos >= len(e.doc.rstrip()) else ""
        raise BadResults(path, f"is not valid JSON: {e.msg} at line {e.lineno}, "
                               f"column {e.colno}{cut}") from None
    if not isinstance(data, dict):
        raise BadResults(path, f"holds a JSON {type(data).__name__}, not the object "
                               "tools/grade --results-json writes")
    tests = data.get("tests")
    if not isinstance(tests, list):
        raise BadResults(path, 'has no "tests" list: not a results file of tools/grade')
    if not _number(data.get("score")):
        raise BadResults(path, 'has no numeric top-level "score"')
    extra = data.get("extra_data") if isinstance(data.get("extra_data"), dict) else {}
    tasks = {}
    for i, t in enumerate(tests, 1):
        where = f"test {i} of {len(tests)}"
        if not isinstance(t, dict):
            raise BadResults(path, f"{where} is not an object")
        label = t.get("name") if isinstance(t.get("name"), str) else None
        if label:
            where += f" ({label[:80]})"
        for key in ("score", "max_score"):
            if not _number(t.get(key)):
                raise BadResults(path, f'{where} has no numeric "{key}"')
        if t.get("status") not in ("passed", "failed"):
            raise BadResults(path, f'{where} has status {t.get("status")!r}, not "passed" '
                                   'or "failed"')
        if t["score"] < 0 or t["score"] > t["max_score"]:
            raise BadResults(path, f"{where} scores {t['score']} of {t['max_score']}")
        own = t.get("extra_data") if isinstance(t.get("extra_data"), dict) else {}
        lesson, task = own.get("lesson"), own.get("task")
        if not (isinstance(lesson, str) and isinstance(task, str)):
            m = TEST_NAME.match(label or "")   # a results file of an older tools/grade
            if not m:
                raise BadResults(path, f"{where} names no lesson and task (extra_data's "
                                       '"lesson" and "task", or a name "LESSON [TASK] ...")')
            lesson, task = m.groups()
        sub = tasks.setdefault((lesson, task), {"score": 0, "max_score": 0, "passed": 0,
                                                "failed": 0, "skipped": 0})
        sub["score"] += t["score"]
        sub["max_score"] += t["max_score"]
        sub["passed" if t["status"] == "passed" else "failed"] += 1
    total = sum(t["score"] for t in tests)
    if abs(total - data["score"]) > 1e-9 * max(1, abs(total)):
        raise BadResults(path, f'its "score" {fmt_points(data["score"])} is not the sum of '
                               f"its tests' scores ({fmt_points(total)})")
    for sub in extra.get("tasks", []) if isinstance(extra.get("tasks"), list) else []:
        # the GPU tests not graded (--gpu-policy exclude) are counted only here
        if isinstance(sub, dict) and _number(sub.get("skipped")) and sub["skipped"] > 0:
            key = (sub.get("lesson"), sub.get("task"))
            if all(isinstance(k, str) for k in key):
                tasks.setdefault(key, {"score": 0, "max_score": 0, "passed": 0, "failed": 0,
                                       "skipped": 0})["skipped"] = int(sub["skipped"])
    policy = extra.get("gpu_policy") if isinstance(extra.get("gpu_policy"), str) else "?"
    return Student(name or os.path.splitext(os.path.basename(path))[0], path, tasks, policy)


def _last_line(path, limit=1 << 16):
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - limit))
            lines = [ln for ln in f.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1].strip()[:200] if lines else ""


def find_results(paths):
    """[(student, path)] of the results files named (a folder: its *.json) and the
    BadResults of a student whose results file is missing: a folder's NAME.txt or NAME.xml
    (the batch loop's report and JUnit file) without NAME.json, or a file named that is not
    there. A student named twice is a BadResults too."""
    found, missing = [], []
    for given in paths:
        if os.path.isdir(given):
            names = sorted(os.listdir(given))
            stems = {os.path.splitext(n)[0] for n in names if n.endswith(".json")}
            for n in names:
                if n.endswith(".json") and os.path.isfile(os.path.join(given, n)):
                    found.append((n[:-5], os.path.join(given, n)))
            for stem in sorted({os.path.splitext(n)[0] for n in names
                                if n.endswith(SIDE_FILES)} - stems):
                report = os.path.join(given, stem + ".txt")
                last = _last_line(report) if os.path.isfile(report) else ""
                side = report if os.path.isfile(report) else os.path.join(given, stem + ".xml")
                missing.append(BadResults(os.path.join(given, stem + ".json"),
                                          f"missing, though {side} is there (the grade did not "
                                          "write it" + (f"; the report's last line: {last!r})"
                                                        if last else ")")))
        elif os.path.isfile(given):
            found.append((os.path.splitext(os.path.basename(given))[0], given))
        else:
            missing.append(BadResults(given, "missing: no such file or folder"))
    seen = {}
    for name, path in found:
        if name in seen:
            missing.append(BadResults(path, f"a second results file of {name!r} (the first: "
                                            f"{seen[name]}); grade each student once"))
        seen.setdefault(name, path)
    return [(n, p) for n, p in found if seen[n] == p], missing


def load_class(paths):
    """(students sorted by name, [BadResults]) of the results files `paths` names."""
    found, problems = find_results(paths)
    students = []
    for name, path in found:
        try:
            students.append(read_results(path, name))
        except BadResults as e:
            problems.append(e)
    return sorted(students, key=lambda s: s.name), problems


def columns(students):
    """The (lesson, task) columns: every task any student has, by lesson and task number;
    a task worth no points in every grade (a build that failed: '-') is left out."""
    keys = {k for s in students for k in s.tasks}
    keys = [k for k in keys if any(s.tasks.get(k, {}).get("max_score", 0) for s in students)]
    return sorted(keys, key=lambda k: (k[0], task_sort_key(k[1])))


def possible(students, key):
    """The largest maximum of a task among the students (they differ only where grades
    ran under --gpu-policy exclude on different machines)."""
    return max((s.tasks[key]["max_score"] for s in students if key in s.tasks), default=0)


def warnings(students, cols):
    """Lines about what makes the grades hard to compare: different GPU policies, a
    task's maximum that differs between students, a task missing from a grade."""
    out = []
    policies = sorted({s.policy for s in students})
    if len(policies) > 1:
        out.append("the grades ran under different GPU policies (" + "; ".join(
            f"{p}: {', '.join(s.name for s in students if s.policy == p)}" for p in policies) + ")")
    for key in cols:
        top = possible(students, key)
        lower = [s for s in students if key in s.tasks and s.tasks[key]["max_score"] != top]
        absent = [s for s in students if key not in s.tasks]
        label = f"{key[0]}/{key[1]}"
        if lower:
            out.append(f"{label}: the maximum is {fmt_points(top)}, but smaller for "
                       + ", ".join(f"{s.name} ({fmt_points(s.tasks[key]['max_score'])})"
                                   for s in lower)
                       + " (GPU tests not graded under --gpu-policy exclude?)")
        if absent:
            out.append(f"{label}: not in the grade of {', '.join(s.name for s in absent)} "
                       "(the lesson not graded for them): an empty cell, no points")
    return out


def short(key):
    """'12 t1' for ('12_transformer', 'task1'): a narrow column header."""
    lesson, task = key
    m = re.fullmatch(r"task(\d+)", task)
    return f"{lesson[:2] if lesson[:2].isdigit() else lesson} {'t' + m.group(1) if m else task}"


def table(students, cols):
    """The printed student × task points table, with the points possible first."""
    heads = [short(k) for k in cols]
    width = max([len("(possible)")] + [len(s.name) for s in students])
    rows = [["(possible)"] + [fmt_points(possible(students, k)) for k in cols] +
            [fmt_points(sum(possible(students, k) for k in cols)), ""]]
    for s in students:
        rows.append([s.name] + [fmt_points(s.tasks[k]["score"]) if k in s.tasks else "-"
                                for k in cols] +
                    [f"{fmt_points(s.score)}/{fmt_points(s.max_score)}",
                     f"{s.passed}/{s.failed}/{s.skipped}"])
    heads = ["student"] + heads + ["points", "passed/failed/skipped"]
    widths = [max(width, len(heads[0]))] + [max(len(h), max(len(r[i + 1]) for r in rows))
                                            for i, h in enumerate(heads[1:])]
    lines = []
    for r in [heads] + rows:
        cells = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def write_csv(path, students, cols):
    """One row per student: student, total, max, passed, failed, skipped, gpu_policy,
    results_file, then for each task its points and its maximum ("L/taskK",
    "L/taskK max"); a task not in a student's grade leaves both cells empty."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["student", "total", "max", "passed", "failed", "skipped", "gpu_policy",
                    "results_file"] + [h for k in cols for h in (f"{k[0]}/{k[1]}",
                                                                  f"{k[0]}/{k[1]} max")])
        for s in students:
            w.writerow([s.name, fmt_points(s.score), fmt_points(s.max_score), s.passed,
                        s.failed, s.skipped, s.policy, s.path] +
                       [v for k in cols for v in
                        ((fmt_points(s.tasks[k]["score"]), fmt_points(s.tasks[k]["max_score"]))
                         if k in s.tasks else ("", ""))])


def write_gradescope_csv(path, students, cols):
    """The scores alone, for a gradebook import: student, total, then each task's points
    ("L/taskK"; empty where the task is not in the student's grade)."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["student", "total"] + [f"{k[0]}/{k[1]}" for k in cols])
        for s in students:
            w.writerow([s.name, fmt_points(s.score)] +
                       [fmt_points(s.tasks[k]["score"]) if k in s.tasks else "" for k in cols])
