"""Verdicts decided outside the tested process. A lesson's tests may record what the code
under test produced (tests/00_gpu_basics/gpu_basics_test_util.h: record()) into the file
MGPU_GRADE_RECORD names. Grading a submission, the grader runs the student's binary and
the reference build's binary on the same inputs (the same --rng-seed, drawn for each
grade) and compares the two records itself: a case whose records are missing or differ
from the reference's by more than the reference's tolerance fails, whatever the student's
process reported. A case the reference records nothing for keeps its in-process verdict."""
import math
import os

RECORD_ENV = "MGPU_GRADE_RECORD"
RECORD_LIMIT = 64 << 20   # characters of a record file read: a larger one is cut


def records_in_sources(paths):
    """Whether a test binary's sources record results (they name RECORD_ENV or include a
    header that does: the lesson's own test folder is searched)."""
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
                        if RECORD_ENV in f.read():
                            return True
                except OSError:
                    continue
    return False


def read_records(path):
    """{case: {key: [(atol, n, [values])]}} of a record file ({} when there is none)."""
    out = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(RECORD_LIMIT)
    except OSError:
        return out
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) != 5:
            continue
        case, key, atol, n, values = parts
        try:
            entry = (float(atol), int(n), [float(v) for v in values.split()])
        except ValueError:
            entry = (0.0, -1, [])   # unreadable: matches nothing the reference recorded
        out.setdefault(case, {}).setdefault(key, []).append(entry)
    return out


def differs(theirs, reference):
    """None when a case's records (theirs) match the reference's, else why, in words."""
    for key, wanted in reference.items():
        got = theirs.get(key, [])
        if len(got) < len(wanted):
            return (f"it recorded no result for '{key}'" if not got else
                    f"it recorded '{key}' {len(got)} time(s), the reference {len(wanted)}")
        for (atol, n, want), (_, their_n, values) in zip(wanted, got):
            if their_n != n or len(values) != len(want):
                return f"'{key}': {their_n} element(s) recorded, the reference has {n}"
            for i, (v, w) in enumerate(zip(values, want)):
                if not (math.isfinite(v) == math.isfinite(w) and
                        (v == w or abs(v - w) <= atol)):
                    return (f"'{key}': element {i} is {v:.9g}, the reference computes "
                            f"{w:.9g} (tolerance {atol:g})")
    return None


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
