"""The Meson build a grade runs against: configuring it, building only the lessons asked
for, what its targets are (from Meson's introspection), and its compile errors, sorted
by lesson and by the task whose fence they are in."""
import importlib.machinery
import importlib.util
import json
import os
import re

from .catch2 import ANSI_ESCAPE
from .process import run

LESSON_RE = re.compile(r"^\d\d_\w+$")
VARIANTS = ("lessons", "solutions")
# gcc/clang "path:line:col: error: ..." and nvcc "path(line): error: ..."
DIAGNOSTIC = re.compile(r"^(?P<path>[^\s:()]+?)(?::(?P<line>\d+)(?::\d+)?:|\((?P<nvline>\d+)\):)"
                        r"\s*(?P<kind>fatal error|error|warning|note)\b")
# Any line that says where it is: a diagnostic, "path: In function ...", "In file included
# from path:line", "                 from path:line", "In instantiation of ..." with a path.
LOCATED = re.compile(r"^(?:In file included from |\s+from )?(?P<path>[^\s:()]+?)"
                     r"(?::\d+(?::\d+)?[:,]?|\(\d+\):|: )")
INCLUDED_FROM = re.compile(r"^(?:In file included from |\s+from )(?P<path>[^\s:()]+?):(?P<line>\d+)")
LINKER = re.compile(r"^(?:\S*/)?(?:ld|ld\.\w+|collect2|nvlink)(?:\.exe)?: ")


def load_check_fences():
    """tools/check_fences as a module: its fence parser is the one definition of a fence."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "check_fences")
    loader = importlib.machinery.SourceFileLoader("check_fences", path)
    spec = importlib.util.spec_from_loader("check_fences", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


check_fences = load_check_fences()


def fences_of(path):
    """[(task, first line, last line)] of a file's fences, 1-based, markers included."""
    try:
        with open(path, "rb") as f:
            lines = f.read().splitlines(keepends=True)
    except OSError:
        return []
    return [(f.task, f.begin + 1, f.end + 1) for f in check_fences.parse_fences(lines, path, [])]


def configured_build_dirs(root):
    """The folders of root that hold a configured Meson build, newest first."""
    found = []
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if os.path.isfile(os.path.join(path, "build.ninja")) and \
                os.path.isdir(os.path.join(path, "meson-info")):
            found.append((os.path.getmtime(os.path.join(path, "build.ninja")), name))
    return [name for _, name in sorted(found, reverse=True)]


class CompileError:
    """One failed build step's diagnostics for one lesson build: task is 'taskK' when the
    first error lies inside that task's fence, '-' otherwise; replaced: that task was
    graded with the unfinished exercise in its place (tools/grade --submission); tasks:
    the tasks whose fences in that file were put back then (all of the file's when the
    error lies outside the fences)."""

    def __init__(self, task, where, text):
        self.task, self.where, self.text = task, where, text
        self.replaced = False
        self.tasks = {task} if task != "-" else set()


class BuildDir:
    """own_only: the compiler output kept in errors is the lines about the lessons' own
    files (a submission's report never quotes another file, e.g. an #include of one)."""

    def __init__(self, root, path, own_only=False, confinement=None):
        self.root, self.path = root, path
        self.own_only = own_only
        # confinement (confine.Confinement): the lessons' targets (the submission's code)
        # are built confined, after everything else they need is built outside.
        self.confinement = confinement
        self.ok, self.log = True, ""
        self.failures = []    # (outputs, text) per 'FAILED:' block of ninja's output
        self._targets = None

    def configured(self):
        return os.path.exists(os.path.join(self.path, "build.ninja"))

    def configure(self, setup_args=()):
        r = run(["meson", "setup", self.path, *setup_args], 1800, cwd=self.root)
        self._targets = None   # read before configuring, the list was empty
        if r.rc != 0:
            self.ok, self.log = False, r.stdout + r.stderr
            self.failures = [("meson setup", r.tail(30))]
        return r.rc == 0

    # ---- what the build defines ---------------------------------------------------------
    def targets(self):
        """Meson's introspection of the targets (name, type, filename, target_sources)."""
        if self._targets is None:
            try:
                with open(os.path.join(self.path, "meson-info", "intro-targets.json")) as f:
                    self._targets = json.load(f)
            except (OSError, ValueError):
                self._targets = []
        return self._targets

    def rel(self, path):
        return os.path.relpath(path, self.path)

    def test_binaries(self):
        """{(variant, lesson): [paths relative to the build folder]} of test binaries:
        test_NN_topic[_mpi], and in the learner's build test_NN_topic_taskK[_mpi], which
        links the learner's code of task K alone (the reference for the rest)."""
        pat = re.compile(r"^(lessons|solutions)/(\d\d_\w+?)/test_\2(_task\d+)?(_mpi)?$")
        paths = [self.rel(f) for t in self.targets() if t["type"] == "executable"
                 for f in t["filename"]]
        if not self.targets():   # no introspection (a pre-built tree): the files there
            for variant in VARIANTS:
                base = os.path.join(self.path, variant)
                for lesson in sorted(os.listdir(base)) if os.path.isdir(base) else []:
                    if os.path.isdir(os.path.join(base, lesson)):
                        paths += [f"{variant}/{lesson}/{f}"
                                  for f in sorted(os.listdir(os.path.join(base, lesson)))]
        found = {}
        for p in sorted(set(paths)):
            m = pat.match(p)
            if m:
                found.setdefault((m.group(1), m.group(2)), []).append(p)
        return found

    def test_sources(self, binary):
        """The source files of a test binary (to list its cases when it did not build)."""
        full = os.path.join(self.path, binary)
        for t in self.targets():
            if full in t["filename"]:
                sources = [s for ts in t["target_sources"] for s in ts.get("sources", [])]
                if sources:
                    return sources
        # A lesson's test sources are compiled once, into tests_NN_topic[_mpi], whose
        # objects every test binary of the lesson links.
        m = re.match(r"^(?:lessons|solutions)/(\d\d_\w+?)/test_\1(?:_task\d+)?(_mpi)?$", binary)
        if m:
            name = f"tests_{m.group(1)}{m.group(2) or ''}"
            for t in self.targets():
                if t["name"] == name:
                    return [s for ts in t["target_sources"] for s in ts.get("sources", [])]
        return []

    def lesson_target(self, variant, lesson):
        """The alias target that builds one lesson's programs and tests, if defined."""
        name = f"{variant}-{lesson}"
        return name if any(t["name"] == name and t["type"] == "run" for t in self.targets()) \
            else None

    def cuda_backend(self):
        return any(s.endswith(".cu") for t in self.targets() if t["name"] == "mgpu"
                   for ts in t["target_sources"] for s in ts.get("sources", []))

    def compiled_kernels(self, variant, lesson):
        """The .cu files of this lesson build that the build compiles (in the library with
        the CUDA backend, or on their own as the kernel check)."""
        prefix = os.path.join(self.root, variant, lesson) + os.sep
        return sorted({os.path.basename(s) for t in self.targets()
                       for ts in t["target_sources"] for s in ts.get("sources", [])
                       if s.endswith(".cu") and s.startswith(prefix)})

    # ---- building ------------------------------------------------------------------------
    def steps(self, targets):
        """How many build commands ninja would run for `targets` now (a dry run), or None
        where ninja cannot tell."""
        r = run(["ninja", "-C", self.path, "-n", *targets], 600, cwd=self.root)
        if r.rc != 0:
            return None
        return sum(1 for line in r.stdout.splitlines() if re.match(r"\[\d+/\d+\]", line))

    def build(self, targets=(), jobs=None):
        """ninja, on through failures (-k 0); only `targets` when given; jobs: -j N (ninja's
        own default, cores + 2, where None). With a confinement (and targets), the
        reference of each lesson (solutions-NN: the library, the tests, the reference
        binaries) is built first, as it is, and the lessons' targets then confined."""
        parallel = ["-j", str(jobs)] if jobs else []
        mine = [t for t in targets if t.startswith("lessons-")]
        if self.confinement is not None and self.confinement.active and mine:
            trusted = [t for t in targets if t not in mine]
            trusted += [self.lesson_target("solutions", t[len("lessons-"):]) for t in mine]
            trusted = [t for t in trusted if t]
            trusted = [t for i, t in enumerate(trusted) if t not in trusted[:i]]
            r = run(["ninja", "-C", self.path, "-k", "0", *parallel, *trusted], 3600, cwd=self.root)
            first = r.stdout + r.stderr
            r = self._build_confined(["ninja", "-C", self.path, "-k", "0", *parallel, *mine])
            r.rc = r.rc or (1 if "FAILED: " in first else 0)
            r.stdout = first + r.stdout
        else:
            r = run(["ninja", "-C", self.path, "-k", "0", *parallel, *targets], 3600, cwd=self.root)
        self.log = ANSI_ESCAPE.sub("", r.stdout + r.stderr)
        self.ok = r.rc == 0
        self.failures = parse_ninja_failures(self.log) if not self.ok else []
        if not self.ok and not self.failures:
            self.failures = [("ninja", "\n".join(self.log.strip().splitlines()[-30:]))]
        self._targets = None   # ninja may have re-run meson
        return self.ok

    def _build_confined(self, argv):
        """Runs the build command argv confined (confine.Confinement.build_command). As uid
        65534 it owns the build folder while it runs; the folder is given back after."""
        from .confine import NOBODY, Launch   # confine imports running, as this module does
        conf = self.confinement
        st = os.stat(self.path)
        cache = os.path.join(self.path, "ccache-confined")   # ccache's, where it is used
        os.makedirs(cache, exist_ok=True)
        if conf.as_nobody:
            run(["chown", "-R", f"{NOBODY}:{NOBODY}", self.path], 600)
        try:
            with Launch(conf) as launch:
                cmd = conf.build_command(launch.folder, argv, self.root, self.path)
                env = conf.env(dict(os.environ, CCACHE_DIR=cache))
                r = run(cmd, 3600, env, launch.folder)
        finally:
            if conf.as_nobody:
                run(["chown", "-R", f"{st.st_uid}:{st.st_gid}", self.path], 600)
        r.rc = conf.status(r.rc)
        return r

    def up_to_date(self, target):
        """After a failed build: was this target built from the current sources?"""
        if self.ok or not self.configured():
            return os.path.exists(os.path.join(self.path, target))
        r = run(["ninja", "-C", self.path, "-n", target], 120, cwd=self.root)
        return r.rc == 0 and "no work to do" in r.stdout

    def owner_of(self, outputs):
        """(variant, lesson) whose build a failed step belongs to, or None."""
        # lib{variant}_NN_topic.a (the provided files), lib{variant}_NN_topic.FILE.a (an
        # exercise file), {variant}/NN_topic/... (programs and tests)
        m = re.search(r"(?:^|[\s/])(?:lib)?(lessons|solutions)[/_](\d\d_\w+?)(?:/|\.)", outputs)
        return (m.group(1), m.group(2)) if m else None

    def errors_of(self, variant, lesson):
        """The CompileErrors of one lesson build, one per failed step."""
        out = []
        for outputs, text in self.failures:
            if self.owner_of(outputs) == (variant, lesson):
                out.append(self._attribute(variant, lesson, outputs, text))
        return out

    def other_failures(self, graded):
        """Failed steps that belong to no lesson build being graded (the library, ...)."""
        return [(o, t) for o, t in self.failures if self.owner_of(o) not in graded]

    def _attribute(self, variant, lesson, outputs, text):
        lines = text.splitlines()
        mine = os.path.join(variant, lesson) + os.sep
        shown = [self.readable(ln) for ln in
                 (self.own_lines(lines, "lessons" + os.sep) if self.own_only else lines)]
        included = None   # the lesson's line that included the file of the next error
        for ln in lines:
            inc = INCLUDED_FROM.match(ln)
            if inc:
                rel = self.project_rel(inc.group("path"))
                if rel.startswith(mine) and included is None:
                    included = (rel, int(inc.group("line")))
                continue
            m = DIAGNOSTIC.match(ln)
            if not m or m.group("kind") not in ("error", "fatal error"):
                if not ln.startswith((" ", "\t")) and not LOCATED.match(ln):
                    included = None
                continue
            rel = self.project_rel(m.group("path"))
            line = int(m.group("line") or m.group("nvline"))
            if not rel.startswith(mine) and included:   # in a file the lesson's code included
                rel, line = included
            if rel.startswith(mine):
                for task, first, last in fences_of(os.path.join(self.root, rel)):
                    if first <= line <= last:
                        return CompileError(task, rel, "\n".join(shown))
                return CompileError("-", f"{rel} (outside the fences)", "\n".join(shown))
            return CompileError("-", rel if not self.own_only or rel.startswith("lessons" + os.sep)
                                else outputs, "\n".join(shown))
        return CompileError("-", outputs, "\n".join(shown))

    def project_rel(self, path):
        """A compiler's path (relative to the build folder, or absolute) from the root."""
        return os.path.relpath(os.path.normpath(os.path.join(self.path, path)), self.root)

    def own_lines(self, lines, prefix):
        """The lines of compiler output about files under `prefix` (from the root): each
        located line with the lines that follow it (the quoted source, the caret), and
        the linker's; the rest is counted in one last line, never shown."""
        out, keep, dropped = [], False, 0
        for ln in lines:
            m = LOCATED.match(ln)
            if LINKER.match(ln):
                keep = True
            elif m and (not ln.startswith(" ") or ln.lstrip().startswith("from ")):
                keep = self.project_rel(m.group("path")).startswith(prefix)
            elif not m and not ln.startswith((" ", "\t", "|")) and ln.strip():
                keep = keep and ln.strip() == "compilation terminated."
            if keep:
                out.append(ln)
            else:
                dropped += 1
        if dropped:
            out.append(f"({dropped} line(s) about other files not shown: the report shows "
                       "the submission's own files only)")
        return out

    def readable(self, line):
        """A compiler line with its path relative to the project root, not the build."""
        m = DIAGNOSTIC.match(line) or re.match(r"^(?:In file included from )?(?P<path>\.\./\S+?)[:(]", line)
        if m and m.group("path").startswith(".."):
            path = os.path.normpath(os.path.join(self.path, m.group("path")))
            return line.replace(m.group("path"), os.path.relpath(path, self.root), 1)
        return line


def parse_ninja_failures(log):
    """[(outputs, text)] for each 'FAILED: outputs' block of ninja's output."""
    blocks, current, skip_command = [], None, False
    for line in ANSI_ESCAPE.sub("", log).splitlines():
        if line.startswith("FAILED: "):
            current = [line[len("FAILED: "):], []]
            blocks.append(current)
            skip_command = True   # ninja prints the failed command next: long, not useful
        elif skip_command:
            skip_command = False
        elif line.startswith("[") and re.match(r"^\[\d+/\d+\] ", line) or line.startswith("ninja: "):
            current = None
        elif current is not None:
            current[1].append(line)
    return [(outs, "\n".join(text)) for outs, text in blocks]


TEST_CASE = re.compile(r'TEST_CASE\s*\(\s*((?:"(?:[^"\\]|\\.)*"\s*)+),\s*((?:"(?:[^"\\]|\\.)*"\s*)+)\)')


def cases_in_sources(paths):
    """[(name, tags)] of the TEST_CASEs in these files, in order (for a test binary that
    did not build: its cases still count, as failed)."""
    escapes = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'", "?": "?"}

    def unescape(s):   # C's simple escapes; other characters (UTF-8 ones too) as they are
        return re.sub(r"\\(.)", lambda m: escapes.get(m.group(1), m.group(0)), s)

    def literal(text):
        return "".join(unescape(s) for s in re.findall(r'"((?:[^"\\]|\\.)*)"', text))
    out = []
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        out += [(literal(m.group(1)), literal(m.group(2))) for m in TEST_CASE.finditer(text)]
    return out
