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


VARYING_LIMIT = 160   # characters of a context line whose value differs between failures
GROUPS_KEPT = 20      # distinct failures kept of one case; the rest are counted


def failure_text(tc):
    """What went wrong in a <TestCase>, one item per line, each failure after its context:
    the section path ("section: A / B") and the INFO/CAPTURE/WARN messages Catch2 printed
    with it (which input, position, policy, parameter, rank), then what the code under
    test threw (its own message, e.g. a TODO's) or the failed expression or FAIL message.
    Identical failures (same section, line, expression and expansion) are one line with
    "(×N)"; their context shows a message they all share once, and one that differs
    between them (the parameter a loop checks) as its values joined by " | ". Failures
    with a thrown error lead; of a context that starts as the previous failure's, only the
    lines that changed are shown; captured stdout/stderr come last."""
    groups, order = {}, []     # key -> {"infos": [tuple per occurrence], ...}
    leftover, streams = [], []

    def add(sections, infos, where_line, message=None):
        key = (tuple(sections), where_line, message)
        if key not in groups:
            groups[key] = {"sections": sections, "line": where_line, "message": message,
                           "infos": []}
            order.append(key)
        groups[key]["infos"].append(tuple(infos))

    def walk(el, sections):
        pending = []   # the Info/Warning elements Catch2 writes just before their failure
        for ch in el:
            where = f"{ch.get('filename', '?')}:{ch.get('line', '?')}"
            if ch.tag == "Section":
                leftover.extend(pending)
                pending = []
                walk(ch, sections + [ch.get("name", "")])
            elif ch.tag == "Expression" and ch.get("success") == "false":
                orig, expanded = _text(ch.find("Original")), _text(ch.find("Expanded"))
                errors = [sub for sub in ch if sub.tag in ("Exception", "FatalErrorCondition")]
                for sub in errors:
                    label = "error" if sub.tag == "Exception" else "fatal error"
                    if orig == UNKNOWN_EXPRESSION:
                        line = f"{where}: thrown by the test after this line"
                    else:
                        line = f"{where}: thrown inside {ch.get('type', 'CHECK')}( {orig} )"
                    add(sections, pending, line, f"{label}: {_text(sub)}")
                if not errors:
                    line = f"{where}: {ch.get('type', 'CHECK')}( {orig} ) failed"
                    if expanded and expanded != orig:
                        line += f" with expansion: {expanded}"
                    add(sections, pending, line)
                pending = []
            elif ch.tag in ("Exception", "FatalErrorCondition"):
                label = "error" if ch.tag == "Exception" else "fatal error"
                add(sections, pending, f"{where}: thrown here", f"{label}: {_text(ch)}")
                pending = []
            elif ch.tag == "Failure":
                add(sections, pending, f"{where}: FAIL: {_text(ch)}")
                pending = []
            elif ch.tag in ("Info", "Warning"):
                pending.append(f"{ch.tag.lower()}: {_text(ch)}")
            elif ch.tag == "OverallResult":
                for stream in ("StdOut", "StdErr"):
                    text = _text(ch.find(stream))
                    if text:
                        streams.append(f"{stream.lower()}:\n{text}")
        leftover.extend(pending)

    walk(tc, [])
    # The code's own error leads (a TODO's message, an exception from the library).
    keys = [k for k in order if groups[k]["message"]] + [k for k in order if not groups[k]["message"]]
    out, shown_context = [], None
    for key in keys[:GROUPS_KEPT]:
        g = groups[key]
        context = _context_lines(g["sections"], g["infos"])
        if context != shown_context:   # what the previous failure's context already said
            same = 0                       # is not repeated: only its lines that changed
            while shown_context and same < min(len(context), len(shown_context)) \
                    and context[same] == shown_context[same]:
                same += 1
            out += context[same:] if same < len(context) else context
            shown_context = context
        n = len(g["infos"])
        if g["message"]:
            out.append(g["message"])
        out.append(g["line"] + (f" (×{n})" if n > 1 else ""))
    if len(keys) > GROUPS_KEPT:
        more = sum(len(groups[k]["infos"]) for k in keys[GROUPS_KEPT:])
        out.append(f"... and {more} more failed check(s) at {len(keys) - GROUPS_KEPT} other "
                   "place(s) or with other values")
    seen = set(ln for ln in out)
    out += [ln for ln in dict.fromkeys(leftover) if ln not in seen]
    return "\n".join(out + streams)


def _context_lines(sections, infos):
    """The context of one (collapsed) failure: its section path, then its messages by
    position (Catch2 lists the outer scope's first): a message that is the same in every
    occurrence that has one is one line; one that differs is its values, each once, joined
    by " | " (cut to VARYING_LIMIT characters, with how many values there are)."""
    lines = [f"section: {' / '.join(sections)}"] if sections else []
    width = max((len(i) for i in infos), default=0)
    for pos in range(width):
        values = [i[pos] for i in infos if pos < len(i)]
        distinct = list(dict.fromkeys(values))
        if len(distinct) == 1:
            lines.append(distinct[0])
            continue
        label = distinct[0].split(": ", 1)[0]
        texts = [v.split(": ", 1)[1] if v.startswith(label + ": ") else v for v in distinct]
        text, shown = "", 0
        for t in texts:
            candidate = t if not shown else f"{text} | {t}"
            if shown and len(candidate) > VARYING_LIMIT:
                break
            text, shown = candidate, shown + 1
        more = f" | ... ({len(texts)} values)" if shown < len(texts) else ""
        lines.append(f"{label}: {text}{more}")
    return lines


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
