"""Verdicts decided outside the tested process. A lesson's tests record what the code under
test produced into the file MGPU_GRADE_RECORD names (under mpirun, each rank into that
name followed by ".rankR"): tests/support/grade_record.h's record(), which the shared
max_rel_diff calls where a test compares its result with a tolerance, and the record()
calls of a lesson's tests (tests/00_gpu_basics/gpu_basics_test_util.h has its own).
Grading a submission, the grader runs the student's binary and the reference build's
binary on the same inputs (the same --rng-seed, drawn for each grade, and the same number
of ranks) and compares the two records itself: a case whose records are missing or differ
from the reference's by more than the reference's tolerance fails, whatever the student's
process reported. A case the reference records nothing for keeps its in-process verdict."""
import math
import os
import re

RECORD_ENV = "MGPU_GRADE_RECORD"
RECORD_LIMIT = 64 << 20   # characters of a record file read: a larger one is cut


# A recorded text (a checked equality) with a fractional number, a path or an address may
# differ between two correct programs: the reference's is not compared.
UNSTABLE_TEXT = re.compile(r"\d\.\d|\d[eE][-+]?\d|\b(?:inf|nan)\b|/|0x[0-9a-fA-F]", re.I)
TEXT = ("text", None)
# A checked `x == Approx(y)`: x is compared as a number with y of the reference, within
# the loosest tolerance a course test gives Approx (margin 0.05, epsilon 0.1): the test
# itself holds x that close to y in the tested process; outside it, x must be a number the
# code computed near the reference's.
APPROX = re.compile(r"^\s*(\S+) == Approx\( (\S+) \)\s*$|^\s*Approx\( (\S+) \) == (\S+)\s*$")
APPROX_MARGIN, APPROX_EPSILON = 0.05, 0.1


def _approx(text):
    """(x, y) of a checked `x == Approx(y)`'s text, else None."""
    m = APPROX.match(text or "")
    if not m:
        return None
    x, y = (m.group(1), m.group(2)) if m.group(1) is not None else (m.group(4), m.group(3))
    try:
        return float(x), float(y)
    except ValueError:
        return None

# Words in a lesson's test sources that mean its cases record results.
RECORD_MARKS = (RECORD_ENV, "max_rel_diff", "grade_record.h")


def records_in_sources(paths):
    """Whether a test binary's sources record results (they name RECORD_ENV, call
    max_rel_diff or include grade_record.h, or a header beside them does: the lesson's own
    test folder is searched)."""
    folders = {os.path.dirname(p) for p in paths}
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
    text of a checked equality)."""
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
        if tol == "text":   # a checked equality as Catch2 printed it, matched exactly
            out.setdefault(case, {}).setdefault(prefix + key, []).append((TEXT, 1, values))
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
            if tol == TEXT:
                why = _text_differs(values if their_tol == TEXT else None, want)
                if why:
                    return f"'{key}': {why}"
                continue
            atol, rel = tol
            if their_tol == TEXT or their_n != n or len(values) != len(want):
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


def _sides(text):
    """(left, right) of a checked equality's text with one " == ", else None."""
    parts = text.split(" == ")
    return tuple(parts) if len(parts) == 2 else None


def _text_differs(theirs, want):
    """None when a checked equality's text (theirs; None: not a text) matches the
    reference's (want), else why. Where the side the code under test did not produce
    differs from the reference's too, both sides depend on the run (timings, memory): not
    compared. So: `x == Approx(y)` fails when x is farther from the reference's y than the
    loosest Approx tolerance and y is the reference's; another text fails when exactly one
    side differs from the reference's (or, without two sides, when it differs at all)."""
    approx = _approx(want)
    if approx:
        _, y = approx
        mine = _approx(theirs)
        near = lambda a: math.isfinite(a) == math.isfinite(y) and \
            (a == y or abs(a - y) <= max(APPROX_MARGIN, APPROX_EPSILON * abs(y)))
        if mine is None or (near(mine[1]) and not near(mine[0])):
            return f"{_cut(theirs or 'a number')}, where the reference checks {_cut(want)}"
        return None
    if UNSTABLE_TEXT.search(want) or theirs == want:
        return None
    mine, ref = _sides(theirs or ""), _sides(want)
    if mine and ref and mine[0] != ref[0] and mine[1] != ref[1]:
        return None
    return f"{_cut(theirs or 'a number')}, where the reference has {_cut(want)}"


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
