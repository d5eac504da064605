"""Verdicts decided outside the tested process. A lesson's tests record what the code under
test produced into the file MGPU_GRADE_RECORD names (under mpirun, each rank into that
name followed by ".rankR"): tests/support/grade_record.h's record(), which the shared
max_rel_diff calls where a test compares its result with a tolerance, and the record()
calls of a lesson's tests (tests/00_gpu_basics/gpu_basics_test_util.h has its own).
Grading a submission, the grader runs the student's binary and the reference build's
binary on the same inputs (the same --rng-seed, drawn for each grade, and the same number
of ranks) and compares the two records itself: a case whose records are missing or differ
from the reference's by more than the reference's tolerance fails, whatever the student's
process reported. A checked equality is recorded by its left side alone (grade_listener.h),
the value the code under test produced: the expected side is never in the file, so a process
that rewrites its record file at exit has nothing to copy from. Each case records its
outcome as it ends (key "outcome"), compared like any text. A case the reference records
nothing for keeps its in-process verdict."""
import math
import os
import re

RECORD_ENV = "MGPU_GRADE_RECORD"
RECORD_LIMIT = 64 << 20   # characters of a record file read: a larger one is cut


# A recorded text (the left side of a checked equality) with a fractional number may differ
# in its last digits between two correct programs: its numbers are compared as Approx's are
# (below), the rest of it exactly. One with a path or an address is not compared.
FRACTIONAL = re.compile(r"\d\.\d|\d[eE][-+]?\d|\b(?:inf|nan)\b", re.I)
UNSTABLE_TEXT = re.compile(r"/|0x[0-9a-fA-F]")
NUMBER = re.compile(r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|\b(?:inf|nan)\b)", re.I)
TEXT = ("text", None)
# The left side x of a checked `x == Approx(y)`: compared as a number with the reference's x,
# within the loosest tolerance a course test gives Approx (margin 0.05, epsilon 0.1).
APPROX = ("approx", None)
APPROX_MARGIN, APPROX_EPSILON = 0.05, 0.1
TEXT_KINDS = {"text": TEXT, "approx": APPROX}

# Words in a lesson's test sources that mean its cases record results.
RECORD_MARKS = (RECORD_ENV, "max_rel_diff", "grade_record.h")


def records_in_sources(paths):
    """Whether a test binary's sources record results: the course's test runners do for
    every case (tests/support/grade_listener.h, found beside the lesson's test folder: each
    checked equality's left side and each case's outcome); elsewhere, where they name
    RECORD_ENV, call max_rel_diff or include grade_record.h, or a header beside them does
    (the lesson's own test folder is searched)."""
    folders = {os.path.dirname(p) for p in paths}
    if any(os.path.isfile(os.path.join(os.path.dirname(f), "support", "grade_listener.h"))
           for f in folders):
        return True
    for folder in folders:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            if name.endswith((".h", ".hpp", ".cpp")):
                try:
                    with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as f:
                        text = f.read()
                except OSError:
                    continue
                if any(mark in text for mark in RECORD_MARKS):
                    return True
    return False


def read_records(path, prefix=""):
    """{case: {prefix + key: [(tolerance, n, [values])]}} of a record file ({} when there is
    none, or it is not a regular file); tolerance: (atol, relative), or TEXT (values: the
    text of a checked equality's left side), or APPROX (the same, compared as a number)."""
    out = {}
    if not os.path.isfile(path) or os.path.islink(path):
        return out
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(RECORD_LIMIT)
    except OSError:
        return out
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) != 5:
            continue
        case, key, tol, n, values = parts
        if tol in TEXT_KINDS:   # a checked equality's left side as Catch2 printed it
            out.setdefault(case, {}).setdefault(prefix + key, []).append((TEXT_KINDS[tol], 1, values))
            continue
        try:
            rel = tol.startswith("rel:")
            entry = ((float(tol[4:] if rel else tol), rel), int(n), [float(v) for v in values.split()])
        except ValueError:
            entry = ((0.0, False), -1, [])   # unreadable: matches nothing the reference recorded
        out.setdefault(case, {}).setdefault(prefix + key, []).append(entry)
    return out


def read_launch_records(path):
    """The records of one launch: the file `path` (one process) and the files path.rankR
    (each rank of an MPI launch; its keys begin with "rank R: ")."""
    out = read_records(path)
    folder, name = os.path.split(path)
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        names = []
    for other in names:
        rank = other[len(name) + 5:] if other.startswith(name + ".rank") else ""
        if rank.isdigit():
            for case, keys in read_records(os.path.join(folder, other), f"rank {rank}: ").items():
                out.setdefault(case, {}).update(keys)
    return out


def differs(theirs, reference):
    """None when a case's records (theirs) match the reference's, else why, in words."""
    for key, wanted in reference.items():
        got = theirs.get(key, [])
        if len(got) < len(wanted):
            return (f"it recorded no result for '{key}'" if not got else
                    f"it recorded '{key}' {len(got)} time(s), the reference {len(wanted)}")
        for (tol, n, want), (their_tol, their_n, values) in zip(wanted, got):
            if tol in (TEXT, APPROX):
                why = _text_differs(values if their_tol == tol else None, want, tol == APPROX)
                if why:
                    return f"'{key}': {why}"
                continue
            atol, rel = tol
            if their_tol in (TEXT, APPROX) or their_n != n or len(values) != len(want):
                return f"'{key}': {their_n} element(s) recorded, the reference has {n}"
            for i, (v, w) in enumerate(zip(values, want)):
                bound = atol * (abs(w) + 1) if rel else atol
                if not (math.isfinite(v) == math.isfinite(w) and
                        (v == w or abs(v - w) <= bound)):
                    return (f"'{key}': element {i} is {v:.9g}, the reference computes "
                            f"{w:.9g} (tolerance {sci(atol)}{' relative' if rel else ''})")
    return None


def sci(x):
    """A tolerance in scientific notation, shortest mantissa: 1e-12, 2.5e-04 (never the
    "0.0" a fixed format makes of a small one)."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    mantissa, exponent = f"{x:.6e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{exponent}"


def _number(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _near(mine, w):
    """Whether the number mine is w within the loosest Approx tolerance."""
    return mine is not None and math.isfinite(mine) == math.isfinite(w) and \
        (mine == w or abs(mine - w) <= max(APPROX_MARGIN, APPROX_EPSILON * abs(w)))


def _numbers_near(theirs, want):
    """Whether two texts are the same but for numbers, each near the reference's."""
    a, b = NUMBER.split(theirs), NUMBER.split(want)
    return len(a) == len(b) and a[0::2] == b[0::2] and \
        all(_near(_number(x), _number(y)) or x.lower() == y.lower() for x, y in zip(a[1::2], b[1::2]))


def _text_differs(theirs, want, approx):
    """None when a checked equality's left side (theirs; None: not recorded as one) matches
    the reference's (want), else why: as a number within the loosest Approx tolerance where
    the check was `x == Approx(y)`; else exactly, or, where the reference's has a fractional
    number, the same text with its numbers that near; a text with a path or an address is
    not compared (UNSTABLE_TEXT)."""
    if approx:
        w = _number(want)
        if w is None or _near(_number(theirs), w):
            return None
        return f"{_cut(theirs or 'nothing')}, where the reference computes {_cut(want)}"
    if theirs == want or UNSTABLE_TEXT.search(want):
        return None
    if theirs is not None and FRACTIONAL.search(want) and _numbers_near(theirs, want):
        return None
    return f"{_cut(theirs or 'nothing')}, where the reference has {_cut(want)}"


def _cut(text, n=120):
    return text if len(text) <= n else text[:n] + "..."


def judge(cases, records, reference):
    """Fails each passed case whose records differ from the reference's (see differs)."""
    for c in cases:
        wanted = reference.get(c.name)
        if c.status != "passed" or not wanted:
            continue
        why = differs(records.get(c.name, {}), wanted)
        if why:
            c.status = "failed"
            c.output = (f"its results, checked outside the test process against the "
                        f"reference build's on the same inputs, differ: {why}" +
                        (f"\n{c.output}" if c.output else ""))
    return cases
