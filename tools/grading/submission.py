"""Grading a student's submission: only the code between the TODO fences of the
student's lessons/ is taken, spliced into a clean copy of the course; the tests, tools,
library and everything else come from the course, and what the student changed there is
reported and ignored. A task whose code does not compile is put back to the unfinished
exercise (and scores what that scores), so it cannot zero the other tasks of its lesson."""
import os
import stat

from . import UsageError
from .building import BuildDir, check_fences
from .confine import Confinement
from .course import Course, walk

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


def sync_clean_copy(course, checkout):
    """Makes checkout hold exactly the course's files (its build folder aside)."""
    keep = set(course.files)
    for rel in course.files:
        dst = os.path.join(checkout, rel)
        target = course.link(rel)
        if target is not None:
            if not (os.path.islink(dst) and os.readlink(dst) == target):
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                if os.path.lexists(dst):
                    os.unlink(dst)
                os.symlink(target, dst)
        else:
            write_if_changed(dst, course.read(rel), course.mode(rel))
    for rel in list(walk(checkout)):
        if rel not in keep:
            os.unlink(os.path.join(checkout, rel))


EXERCISE_LIMIT = 1 << 20   # bytes: an exercise file larger than this is not read


class Refused(Exception):
    """A submission file that is not read: why, in words (for the report)."""


def open_in(student, rel):
    """A file descriptor of student/rel, read-only, opened without following a link at
    any step: a link (to the course's solutions/, to another student's files) is refused,
    as are what is not a regular file and a hard link (it may be another's file)."""
    path = student
    parts = rel.split("/")
    for i, part in enumerate(parts[:-1]):
        path = os.path.join(path, part)
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            raise Refused(f"{'/'.join(parts[:i + 1])}/ is a symbolic link (to "
                          f"{os.readlink(path)}): nothing is read through a link")
        if not stat.S_ISDIR(st.st_mode):
            raise FileNotFoundError(path)
    path = os.path.join(path, parts[-1])
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        if os.path.islink(path):
            raise Refused(f"a symbolic link (to {os.readlink(path)}): nothing is read "
                          "through a link") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise Refused("not a regular file")
    if st.st_nlink > 1:
        os.close(fd)
        raise Refused(f"a hard link ({st.st_nlink} names): it may be another's file")
    return fd, st.st_size


def read_submitted(student, rel, limit=EXERCISE_LIMIT):
    """The bytes of student/rel (see open_in), or Refused when it is over `limit` bytes
    (without reading it); FileNotFoundError when it is not there."""
    fd, size = open_in(student, rel)
    with os.fdopen(fd, "rb") as f:
        if size > limit:
            raise Refused(f"{size} bytes, over the limit of {limit} bytes: not read")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise Refused(f"over the limit of {limit} bytes: not read")
    return data


def fenced_files(course):
    """{rel: fences} of the course's exercise files (lessons/NN_topic/* with fences)."""
    out = {}
    for rel in course.files:
        parts = rel.split("/")
        if len(parts) == 3 and parts[0] == "lessons" and not rel.endswith(".md") \
                and course.link(rel) is None:
            fences = check_fences.parse_fences(course.read_lines(rel), rel, [])
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


def take_fences(course, student, checkout, exercise, reverted):
    """Writes each exercise file of the checkout: the course's, with the student's fence
    bodies (except the tasks in reverted[file]). Returns the report's lines."""
    notes, refused_dirs = [], set()
    for rel, fences in sorted(exercise.items()):
        ours = course.read_lines(rel)
        lines = ours
        try:
            theirs = read_submitted(student, rel).splitlines(keepends=True)
        except Refused as e:
            why = str(e)
            if "/ is a symbolic link" in why:   # a linked folder: one line for its files
                if why not in refused_dirs:
                    refused_dirs.add(why)
                    notes.append(f"refused: {why}; its exercise files keep the unfinished "
                                 "exercise")
            else:
                notes.append(f"refused: {rel}: {why}; its tasks keep the unfinished exercise")
            theirs = None
        except OSError:
            notes.append(f"{rel}: not in the submission; its tasks keep the unfinished exercise")
            theirs = None
        if theirs is not None:
            problems = []
            their_fences = check_fences.parse_fences(theirs, rel, problems)
            if problems:
                notes.append(f"{rel}: its fences do not pair up ({problems[0].split(': ', 1)[-1]}); "
                             "the file keeps the unfinished exercise")
            else:
                lines, _, missing = splice(ours, fences, theirs, their_fences,
                                           reverted.get(rel, ()))
                if missing:
                    notes.append(f"{rel}: no fence for {', '.join(sorted(missing))} in the "
                                 "submission; kept the unfinished exercise")
                outside_course = check_fences.outside_segments(ours, fences)
                outside_theirs = check_fences.outside_segments(theirs, their_fences)
                if [s for _, s in outside_course] != [s for _, s in outside_theirs]:
                    notes.append(f"{rel}: changes outside the fences ignored")
        write_if_changed(os.path.join(checkout, rel), b"".join(lines))
    return notes


def lesson_of(rel):
    """'NN_topic' for a file of one lesson's folders (lessons/, solutions/, tests/), else None."""
    parts = rel.split("/")
    if len(parts) > 2 and parts[0] in ("lessons", "solutions", "tests") and parts[1][:2].isdigit():
        return parts[1]
    return None


def compare_rest(course, student, exercise, lessons):
    """Lines naming the course files the student edited, removed or added (all ignored),
    for the lessons graded and the files of no lesson; a file missing from the submission
    is named only in a graded lesson's own folder (a submission may be lessons/ alone)."""
    def concerns(rel):
        return lesson_of(rel) is None or lesson_of(rel) in lessons
    edited, removed, refused = [], [], []
    for rel in course.files:
        if rel in exercise or course.link(rel) is not None or not concerns(rel):
            continue
        try:
            fd, size = open_in(student, rel)
        except Refused:
            refused.append(rel)
            continue
        except OSError:
            if rel.startswith("lessons/") and lesson_of(rel) in lessons:
                removed.append(rel)
            continue
        ours = course.read(rel)
        with os.fdopen(fd, "rb") as b:   # never more than the course's copy and a byte
            if size != len(ours) or b.read(len(ours) + 1) != ours:
                edited.append(rel)
    known = set(course.files)
    added = [rel for rel in walk(student) if rel not in known and concerns(rel)]

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
    if refused:
        notes.append(listed("not read (links, hard links or not regular files)", refused))
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
                e.tasks = tasks
                found.setdefault(("lessons", lesson), []).append(e)
    return found


def graded_lessons(course, wanted):
    """The lessons of the course that `wanted` (['00', '06_sync_batchnorm'], or [] for all)
    names; a name that matches no lesson is a usage error, before anything is compiled."""
    lessons = sorted({rel.split("/")[1] for rel in course.files
                      if rel.startswith("lessons/") and rel.count("/") >= 2 and lesson_of(rel)})
    if not wanted:
        return lessons
    chosen = []
    for want in wanted:
        matches = [l for l in lessons if l == want or l.startswith(want.rstrip("_") + "_")]
        if not matches:
            raise UsageError(f"no lesson matches {want!r}; lessons: {', '.join(lessons)}")
        chosen += [m for m in matches if m not in chosen]
    return chosen


def grade_submission(args, root, grade):
    student = os.path.realpath(args.submission)   # the folder given; nothing below is followed
    if not os.path.isdir(os.path.join(student, "lessons")):
        raise UsageError(f"{args.submission} has no lessons/ folder: give the top folder of "
                         "the student's copy of the course")
    work = os.path.abspath(args.work_dir or os.path.join(root, "build-submission"))
    if os.path.exists(work) and not os.path.isdir(work):
        raise UsageError(f"--work-dir {args.work_dir} is a file: give a folder (it is created "
                         "if missing)")
    checkout = os.path.join(work, "course")
    if os.path.commonpath([work, student]) in (work, student):
        raise UsageError("--work-dir and the submission must not contain one another")
    course = Course(root)
    lessons = graded_lessons(course, args.lessons)
    os.makedirs(checkout, exist_ok=True)
    exercise = {rel: f for rel, f in fenced_files(course).items() if lesson_of(rel) in lessons}
    sync_clean_copy(course, checkout)
    notes = take_fences(course, student, checkout, exercise, {})
    notes += compare_rest(course, student, exercise, lessons)
    if course.uncommitted_note():
        notes.insert(0, course.uncommitted_note())
    print(f"grade: the fenced code of {student} goes into a clean copy of the course "
          f"({course.source}, in {checkout})", flush=True)

    # What the submission's code must not see, compiled or run: the clean copy and its
    # build (solutions/, the reference binaries; a build sees the clean copy without
    # them), the course's checkout, the submission and the folder of the class that holds
    # it, and the grading user's home.
    args.hidden = [checkout, root, student, os.path.expanduser("~")]
    if os.path.dirname(student).count(os.sep) >= 2:
        args.hidden.append(os.path.dirname(student))
    confinement = Confinement(args.hidden, args.memory_limit, args.file_size_limit,
                              args.disk_limit)
    notes.append("The submission's code compiles confined too: " + (
        "as the tests run, seeing the clean copy without its solutions/ (see docs/instructors.md)."
        if confinement.active else "no: " + confinement.note.split(": ", 1)[-1]))

    # Build once; a task that does not compile goes back to the exercise, then once more.
    build = BuildDir(checkout, os.path.join(checkout, "build"), own_only=True,
                     confinement=confinement)
    if not build.configured() and not build.configure(args.setup_arg):
        print(f"grade: the clean copy could not be configured:\n{build.failures[0][1]}")
        return 1
    replaced, reverted = {}, {}
    for _ in range(3):
        aliases = [a for a in (build.lesson_target("lessons", l) for l in lessons) if a]
        print(f"grade: compiling the submission ({len(aliases)} lesson target(s)) to find "
              "tasks that do not compile", flush=True)
        if build.build(aliases, args.jobs):
            break
        found = revert_broken_tasks(build, lessons, exercise, reverted)
        if not found:
            break
        for key, errors in found.items():
            replaced.setdefault(key, []).extend(errors)
            for e in errors:
                print(f"grade:   {key[1]} {e.task}: does not compile ({e.where}); graded "
                      "with the unfinished exercise in its place")
        take_fences(course, student, checkout, exercise, reverted)
    args.build_dir = build.path
    header = [f"Submission: {student} (only the code inside the TODO fences of lessons/ "
              "is graded)"] + notes
    return grade(args, checkout, extra_header=header, replaced=replaced, submission=True)
