"""Grading a student's submission: only the code between the TODO fences of the
student's lessons/ is taken, spliced into a clean copy of the course; the tests, tools,
library and everything else come from the course, and what the student changed there is
reported and ignored. A task whose code does not compile is put back to the unfinished
exercise (and scores what that scores), so it cannot zero the other tasks of its lesson."""
import os
import subprocess

from . import UsageError
from .building import BuildDir, check_fences

SKIP_DIRS = {".git", "__pycache__", ".deps", ".whl"}


def course_files(root):
    """The course's files, relative to root: git's tracked files, or every file outside
    build folders where root is not a git checkout."""
    try:
        r = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True, check=True)
        files = [f for f in r.stdout.decode().split("\0") if f]
        return sorted(f for f in files if os.path.lexists(os.path.join(root, f)))
    except (OSError, subprocess.CalledProcessError):
        return sorted(walk(root))


def is_build_dir(path):
    return os.path.exists(os.path.join(path, "build.ninja")) or \
        os.path.isdir(os.path.join(path, "meson-private"))


def walk(top):
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and
                             not d.startswith("build") and not is_build_dir(os.path.join(dirpath, d)))
        for f in filenames:
            yield os.path.relpath(os.path.join(dirpath, f), top)


def write_if_changed(path, data, mode=None):
    """Writes only what differs, so ninja recompiles only what the submission changed."""
    try:
        with open(path, "rb") as f:
            if f.read() == data:
                return False
    except OSError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.islink(path):
        os.unlink(path)
    with open(path, "wb") as f:
        f.write(data)
    if mode is not None:
        os.chmod(path, mode)
    return True


def sync_clean_copy(root, checkout, files):
    """Makes checkout hold exactly the course's files (its build folder aside)."""
    keep = set(files)
    for rel in files:
        src, dst = os.path.join(root, rel), os.path.join(checkout, rel)
        if os.path.islink(src):
            target = os.readlink(src)
            if not (os.path.islink(dst) and os.readlink(dst) == target):
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                if os.path.lexists(dst):
                    os.unlink(dst)
                os.symlink(target, dst)
        else:
            with open(src, "rb") as f:
                write_if_changed(dst, f.read(), os.stat(src).st_mode & 0o777)
    for rel in list(walk(checkout)):
        if rel not in keep:
            os.unlink(os.path.join(checkout, rel))


def read_lines(path):
    with open(path, "rb") as f:
        return f.read().splitlines(keepends=True)


def fenced_files(root, files):
    """{rel: fences} of the course's exercise files (lessons/NN_topic/* with fences)."""
    out = {}
    for rel in files:
        parts = rel.split("/")
        if len(parts) == 3 and parts[0] == "lessons" and not rel.endswith(".md") \
                and not os.path.islink(os.path.join(root, rel)):
            fences = check_fences.parse_fences(read_lines(os.path.join(root, rel)), rel, [])
            if fences:
                out[rel] = fences
    return out


def splice(course_lines, course_fences, student_lines, student_fences, keep_tasks=()):
    """The course file with each fence's body taken from the student's fence of the same
    task (the k-th of that task for the k-th); tasks in keep_tasks keep the course's
    body. Returns (lines, tasks taken, tasks not found in the student's file)."""
    by_task = {}
    for f in student_fences:
        by_task.setdefault(f.task, []).append(f)
    out, pos, seen, taken, missing = [], 0, {}, set(), set()
    for f in course_fences:
        k = seen.get(f.task, 0)
        seen[f.task] = k + 1
        out += course_lines[pos:f.begin + 1]
        theirs = by_task.get(f.task, [])
        if f.task in keep_tasks or k >= len(theirs):
            out += course_lines[f.begin + 1:f.end]
            if f.task not in keep_tasks:
                missing.add(f.task)
        else:
            out += student_lines[theirs[k].begin + 1:theirs[k].end]
            taken.add(f.task)
        pos = f.end
    out += course_lines[pos:]
    return out, taken, missing


def take_fences(root, student, checkout, exercise, reverted):
    """Writes each exercise file of the checkout: the course's, with the student's fence
    bodies (except the tasks in reverted[file]). Returns the report's lines."""
    notes = []
    for rel, fences in sorted(exercise.items()):
        course = read_lines(os.path.join(root, rel))
        mine = os.path.join(student, rel)
        lines = course
        if not os.path.isfile(mine):
            notes.append(f"{rel}: not in the submission; its tasks keep the unfinished exercise")
        else:
            theirs = read_lines(mine)
            problems = []
            their_fences = check_fences.parse_fences(theirs, rel, problems)
            if problems:
                notes.append(f"{rel}: its fences do not pair up ({problems[0].split(': ', 1)[-1]}); "
                             "the file keeps the unfinished exercise")
            else:
                lines, _, missing = splice(course, fences, theirs, their_fences,
                                           reverted.get(rel, ()))
                if missing:
                    notes.append(f"{rel}: no fence for {', '.join(sorted(missing))} in the "
                                 "submission; kept the unfinished exercise")
                outside_course = check_fences.outside_segments(course, fences)
                outside_theirs = check_fences.outside_segments(theirs, their_fences)
                if [s for _, s in outside_course] != [s for _, s in outside_theirs]:
                    notes.append(f"{rel}: changes outside the fences ignored")
        write_if_changed(os.path.join(checkout, rel), b"".join(lines))
    return notes


def compare_rest(root, student, files, exercise):
    """Lines naming the course files the student edited, removed or added (all ignored)."""
    edited, removed = [], []
    for rel in files:
        if rel in exercise or os.path.islink(os.path.join(root, rel)):
            continue
        mine = os.path.join(student, rel)
        if not os.path.isfile(mine):
            removed.append(rel)
            continue
        with open(os.path.join(root, rel), "rb") as a, open(mine, "rb") as b:
            if a.read() != b.read():
                edited.append(rel)
    known = set(files)
    added = [rel for rel in walk(student) if rel not in known]

    def listed(what, paths):
        shown = ", ".join(paths[:8]) + (f" and {len(paths) - 8} more" if len(paths) > 8 else "")
        return f"{what} ({len(paths)}, ignored: the course's copy is used): {shown}"
    notes = []
    if edited:
        notes.append(listed("edited outside the fences", edited))
    if added:
        notes.append(listed("files that are not the course's", added))
    if removed:
        notes.append(listed("course files missing from the submission", removed))
    return notes


def revert_broken_tasks(build, lessons, exercise, reverted):
    """After a build: in the file that holds a compile error, the fences of its task go
    back to the unfinished exercise (all of the file's fences when the error lies outside
    them, e.g. after an unbalanced brace). The task's fences in other files stay: a CPU
    twin that compiles still earns its points when only the kernel does not.
    Returns {(variant, lesson): [CompileError]} of what was put back, or {}."""
    found = {}
    for lesson in lessons:
        for e in build.errors_of("lessons", lesson):
            rel = e.where.split(" ")[0]
            if rel not in exercise:
                continue
            tasks = {e.task} if e.task != "-" else {f.task for f in exercise[rel]}
            new = tasks - set(reverted.get(rel, ()))
            if new:
                reverted.setdefault(rel, set()).update(new)
                e.replaced = True
                found.setdefault(("lessons", lesson), []).append(e)
    return found


def grade_submission(args, root, grade):
    student = os.path.abspath(args.submission)
    if not os.path.isdir(os.path.join(student, "lessons")):
        raise UsageError(f"{args.submission} has no lessons/ folder: give the top folder of "
                         "the student's copy of the course")
    work = os.path.abspath(args.work_dir or os.path.join(root, "build-submission"))
    checkout = os.path.join(work, "course")
    if os.path.commonpath([work, student]) in (work, student):
        raise UsageError("--work-dir and the submission must not contain one another")
    os.makedirs(checkout, exist_ok=True)
    files = course_files(root)
    exercise = fenced_files(root, files)
    sync_clean_copy(root, checkout, files)
    notes = take_fences(root, student, checkout, exercise, {})
    notes += compare_rest(root, student, files, exercise)
    print(f"grade: the fenced code of {student} goes into a clean copy of the course "
          f"({checkout})", flush=True)

    # Build once; a task that does not compile goes back to the exercise, then once more.
    build = BuildDir(checkout, os.path.join(checkout, "build"))
    if not build.configured() and not build.configure(args.setup_arg):
        print(f"grade: the clean copy could not be configured:\n{build.failures[0][1]}")
        return 1
    lessons = sorted(d for d in os.listdir(os.path.join(checkout, "lessons"))
                     if (os.path.isdir(os.path.join(checkout, "lessons", d)) and d[:2].isdigit()))
    if args.lessons:
        lessons = [l for l in lessons if any(l == w or l.startswith(w.rstrip("_") + "_")
                                             for w in args.lessons)] or lessons
    replaced, reverted = {}, {}
    for _ in range(3):
        aliases = [a for a in (build.lesson_target("lessons", l) for l in lessons) if a]
        print(f"grade: compiling the submission ({len(aliases)} lesson target(s)) to find "
              "tasks that do not compile", flush=True)
        if build.build(aliases):
            break
        found = revert_broken_tasks(build, lessons, exercise, reverted)
        if not found:
            break
        for key, errors in found.items():
            replaced.setdefault(key, []).extend(errors)
            for e in errors:
                print(f"grade:   {key[1]} {e.task}: does not compile ({e.where}); graded "
                      "with the unfinished exercise in its place")
        take_fences(root, student, checkout, exercise, reverted)
    args.build_dir = build.path
    header = [f"Submission: {student} (only the code inside the TODO fences of lessons/ "
              "is graded)"] + notes
    return grade(args, checkout, extra_header=header, replaced=replaced)
