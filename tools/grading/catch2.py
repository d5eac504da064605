"""Catch2 v2 test cases: their tags (task, points, gpu), their XML reports, their listings."""
import re
import xml.etree.ElementTree as ET

ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")   # compilers and Catch2 colour output


def split_tags(tags):
    """'[00_gpu_basics][points:3][task1]' -> ['00_gpu_basics', 'points:3', 'task1']"""
    return re.findall(r"\[([^\]]*)\]", tags or "")


def points_of(tags):
    for t in split_tags(tags):
        m = re.fullmatch(r"points:(\d+(?:\.\d+)?)", t)
        if m:
            value = float(m.group(1))
            return int(value) if value.is_integer() else value
    return 0


def task_of(tags):
    for t in split_tags(tags):
        if re.fullmatch(r"task\d+", t):
            return t
    return "-"


class Case:
    """One test case's outcome. kind: 'cpu', 'gpu' (one process) or 'mpi' (under mpirun,
    with 2 and 3 ranks); status: 'passed', 'failed' or 'skipped'."""

    def __init__(self, name, tags, status, output="", seconds=0.0, kind="cpu"):
        self.name, self.tags, self.status = name, tags, status
        self.output, self.seconds, self.kind = output, seconds, kind

    @property
    def points(self):
        return points_of(self.tags)

    @property
    def task(self):
        return task_of(self.tags)

    @property
    def graded(self):
        return self.points > 0

    @property
    def gpu(self):
        return "gpu" in split_tags(self.tags)

    @property
    def score(self):
        return self.points if self.status == "passed" else 0

    def key(self):
        return (self.kind, self.name)


def _text(el):
    return (el.text or "").strip() if el is not None else ""


UNKNOWN_EXPRESSION = "{Unknown expression after the reported line}"


def failure_text(tc):
    """What went wrong in a <TestCase>, one item per line: first what the code under test
    threw (its own message, e.g. a TODO's, leads), then failed expressions and FAIL
    messages, then INFO/WARN context and captured stdout/stderr."""
    thrown, failed, context = [], [], []

    def walk(el, sections):
        for ch in el:
            where = f"{ch.get('filename', '?')}:{ch.get('line', '?')}"
            prefix = f"[{' / '.join(sections)}] " if sections else ""
            if ch.tag == "Section":
                walk(ch, sections + [ch.get("name", "")])
            elif ch.tag == "Expression" and ch.get("success") == "false":
                orig, expanded = _text(ch.find("Original")), _text(ch.find("Expanded"))
                errors = [sub for sub in ch if sub.tag in ("Exception", "FatalErrorCondition")]
                for sub in errors:
                    label = "error" if sub.tag == "Exception" else "fatal error"
                    thrown.append(f"{prefix}{label}: {_text(sub)}")
                    if orig == UNKNOWN_EXPRESSION:
                        failed.append(f"{where}: {prefix}thrown by the test after this line")
                    else:
                        failed.append(f"{where}: {prefix}thrown inside "
                                      f"{ch.get('type', 'CHECK')}( {orig} )")
                if errors:
                    continue
                line = f"{where}: {prefix}{ch.get('type', 'CHECK')}( {orig} ) failed"
                if expanded and expanded != orig:
                    line += f" with expansion: {expanded}"
                failed.append(line)
            elif ch.tag in ("Exception", "FatalErrorCondition"):
                label = "error" if ch.tag == "Exception" else "fatal error"
                thrown.append(f"{prefix}{label}: {_text(ch)}")
                failed.append(f"{where}: {prefix}thrown here")
            elif ch.tag == "Failure":
                failed.append(f"{where}: {prefix}FAIL: {_text(ch)}")
            elif ch.tag in ("Info", "Warning"):
                context.append(f"{prefix}{ch.tag.lower()}: {_text(ch)}")
            elif ch.tag == "OverallResult":
                for stream in ("StdOut", "StdErr"):
                    text = _text(ch.find(stream))
                    if text:
                        context.append(f"{stream.lower()}:\n{text}")

    walk(tc, [])
    return "\n".join(thrown + failed + context)


class Report:
    """A parsed `-r xml` report. cases: dicts with name, tags, success, output, seconds;
    complete: the report was whole; started: the case that began and never ended (a run
    that crashed, aborted or was killed inside it), or None; records: what the launch
    recorded (verdicts.read_records), None where it recorded nothing."""

    def __init__(self, cases, complete, started):
        self.cases, self.complete, self.started = cases, complete, started
        self.records = None


def parse_catch_xml(text):
    """Parses Catch2's XML report, salvaging what it can from a truncated one."""
    start = text.find("<?xml")
    if start < 0:
        start = text.find("<Catch")
    if start < 0:
        return Report([], False, None)
    end = text.find("</Catch>", start)
    body = text[start:end + len("</Catch>")] if end >= 0 else text[start:]
    parser = ET.XMLPullParser(events=("start", "end"))
    cases, complete, open_case = [], False, None
    try:
        parser.feed(body)
        for event, el in parser.read_events():
            if el.tag == "TestCase" and event == "start":
                open_case = (el.get("name", ""), el.get("tags", ""))
            elif el.tag == "TestCase":
                open_case = None
                result = el.find("OverallResult")
                seconds = float(result.get("durationInSeconds", 0)) if result is not None else 0.0
                cases.append({
                    "name": el.get("name", ""),
                    "tags": el.get("tags", ""),
                    "success": result is not None and result.get("success") == "true",
                    "output": failure_text(el),
                    "seconds": seconds,
                })
            elif el.tag == "Catch" and event == "end":
                complete = True
    except ET.ParseError:
        pass
    return Report(cases, complete, None if complete else open_case)


def parse_test_list(names_only, listing):
    """Combines `--list-test-names-only` (exact names) with `--list-tests` (tags; names
    wrapped at the console width) into [(name, tags)]. In the listing each case is a
    block: its name at indent 2 (continued at indent 4), its tags at indent 6."""
    names_only, listing = ANSI_ESCAPE.sub("", names_only), ANSI_ESCAPE.sub("", listing)
    names = []
    for line in names_only.splitlines():
        line = line.rstrip("\r")
        if not line.strip():
            continue
        if line.startswith('"#') and line.endswith('"'):
            line = line[1:-1]   # Catch2 quotes names that start with '#'
        names.append(line)
    blocks = []
    for line in listing.splitlines():
        line = line.rstrip("\r")
        if line.startswith("      "):
            if blocks:
                blocks[-1] += line.strip()
        elif line.startswith("    "):
            continue
        elif line.startswith("  ") and line.strip():
            blocks.append("")
    if len(blocks) != len(names):
        blocks = [""] * len(names)
    return list(zip(names, blocks))


def name_filter(names):
    """A Catch2 test spec that selects exactly these cases by name: commas separate the
    names; a backslash escapes what the spec language would read otherwise."""
    def escape(name):
        out = re.sub(r"([\\,\[\]*\"~])", r"\\\1", name)
        return out
    return ",".join(escape(n) for n in names)
