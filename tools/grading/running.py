"""Running test binaries: each launch under a time limit, in its own process group (so a
hung mpirun and its ranks die together), and one crash never costing more than the case
it happened in."""
import os
import re
import secrets
import shutil

from .catch2 import Case, name_filter, parse_catch_xml, parse_test_list
from .confine import Launch, Unconfined
from .budgets import TimeBudget
from .process import run
from .verdicts import RECORD_ENV, judge, read_launch_records

SKIP_STATUS = 77           # tests/support: --require-gpu where no GPU is present
MPI_WORLD_SIZES = (2, 3)   # 3 catches off-by-one splits that 2 hides
REPORT_LIMIT = 64 << 20    # characters of a report read: a larger one is cut (and fails)


def task_of_binary(binary):
    """'taskK' for a task's test binary (test_NN_topic_taskK[_mpi]), else None."""
    m = re.search(r"_(task\d+)(?:_mpi)?$", os.path.basename(binary))
    return m.group(1) if m else None


def cases_filter(binary, binaries):
    """The Catch2 filter of the cases `binary` runs, among the test binaries of one lesson
    build: a task's binary (it links the learner's code of task K and the reference of the
    others) runs task K's cases, '[taskK]'; where there are task binaries, the whole one
    runs the cases of no task, '~[task1]~[task2]...'; else everything, ''."""
    task = task_of_binary(binary)
    if task:
        return f"[{task}]"
    tasks = sorted({t for t in map(task_of_binary, binaries) if t}, key=lambda t: int(t[4:]))
    return "".join(f"~[{t}]" for t in tasks)


def selects(only, tags):
    """Whether a filter of cases_filter ('[taskK]', '~[task1]~[task2]', '') selects tags."""
    wanted = re.findall(r"(~?)(\[[^\]]*\])", only)
    return all((tag in tags) != bool(neg) for neg, tag in wanted)


class Runner:
    """Runs one test binary's cases (directly or under mpirun) and turns them into Cases.

    A launch that ends inside a case (a crash, MPI_Abort, a deadlock killed by the time
    limit) fails that case alone: the cases it never reached run again in a new launch,
    so one bug in one task never zeroes the rest of the lesson."""

    def __init__(self, timeout, workdir, root, gpu_expected=False, decoy=False, confinement=None,
                 gpu_possible=True, budget=0):
        self.timeout = timeout or None   # 0: no limit
        # budget: seconds all the launches of a submission may take together (0: no limit);
        # once spent, the launches left are not run and their cases fail saying so.
        self.budget = TimeBudget(budget)
        # How each launch runs (confine.Confinement: a submission's tests), else as it is.
        self.confinement = confinement or Unconfined()
        # decoy: before its cases, each binary runs once with a filter that selects none
        # (see forged); a report of any case there voids the binary's reports.
        self.decoy = decoy
        # gpu_expected: the build has the CUDA backend and this machine a GPU, so exit
        # status 77 ("no GPU here") from a GPU launch is a lie, not a skip.
        self.gpu_expected = gpu_expected
        # gpu_possible: False where the build has no CUDA backend: a GPU case reported as
        # passed there was never run (a forged report), and fails.
        self.gpu_possible = gpu_possible
        self.workdir = workdir
        mpirun = os.path.join(root, "tools", "mpirun")   # the course's mpirun settings
        self.mpirun = mpirun if shutil.which("mpirun") and os.access(mpirun, os.X_OK) else None
        # The filter of its standard error, which it runs from its own folder.
        self.mpirun_programs = [p for p in (mpirun, os.path.join(root, "tools", "mpirun-quiet"))
                                if os.path.isfile(p)]
        self.env = dict(os.environ)
        # Containers often forbid the cross-memory attach Open MPI uses between ranks.
        self.env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
        # A stuck collective or message ends with the library's words (which rank, which op,
        # which peer and tag) within seconds, long before the launch's own time limit would
        # kill it without any: 5 s, or half of a shorter launch limit. No op of the
        # reference waits for another rank that long.
        if self.timeout:
            self.env.setdefault("MGPU_DIST_TIMEOUT_S", f"{max(1.0, min(5.0, self.timeout / 2)):g}")
        self.env = self.confinement.env(self.env)
        self.launches = 0
        # checked: {test binary: the reference build's binary}. Their launches record
        # results (verdicts.py) on inputs of one seed, compared with the reference's here.
        self.checked = {}
        self.seed = secrets.randbelow(1 << 31) + 1
        self._reference_records = {}

    @property
    def timeout_text(self):
        return self.timeout or 0

    def mpi_prefix(self, nprocs):
        return [self.mpirun, "-np", str(nprocs)]

    def _run(self, launch, prefix, exe, args, timeout, env=None):
        """Runs exe with args after prefix ([] or mpirun's) as this launch does."""
        programs = [exe] + (self.mpirun_programs if prefix[:1] == [self.mpirun] else [])
        if self.budget.left() == 0:
            return self.budget.not_run()
        timeout, by_budget = self.budget.limit(timeout)
        r = run(launch.command(prefix + [exe, *args], programs), timeout,
                dict(self.env, **(env or {})), self.workdir, self.confinement.watch())
        r.rc = self.confinement.status(r.rc) if not (r.timed_out or r.stopped) else r.rc
        self.budget.charge(r, by_budget)
        return self.confinement.over_budget(r)

    def list_cases(self, prefix, exe, filt):
        common = ["--use-colour", "no", filt]
        with Launch(self.confinement) as launch:
            names = self._run(launch, prefix, exe, ["--list-test-names-only", *common], 120)
            listing = self._run(launch, prefix, exe, ["--list-tests", *common], 120)
        seen, out = set(), []
        for name, tags in parse_test_list(names.stdout, listing.stdout):
            if name not in seen:   # under mpirun every rank may list them
                seen.add(name)
                out.append((name, tags))
        return out

    def _launch(self, prefix, exe, filt, extra):
        """One launch with the XML reporter: (Report, Run). The report goes to a file, never
        through stdout: a file keeps the code's printf output out of the XML, and under
        mpirun rank 0 writes it itself (tests/support/mpi_main.cpp sends the other ranks'
        reports elsewhere), so an abort cannot lose the output mpirun had not forwarded yet."""
        self.launches += 1
        with Launch(self.confinement) as launch:
            report, written = launch.report()
            args = ["-o", written, *extra, "-r", "xml", "-d", "yes", filt]
            env, records = None, None
            if exe in self.checked:
                records, inside = launch.file("record.txt")
                args[-1:-1] = ["--rng-seed", str(self.seed)]
                env = {RECORD_ENV: inside}
            r = self._run(launch, prefix, exe, args, self.timeout, env)
            text = ""
            if os.path.isfile(report) and not os.path.islink(report):
                with open(report, encoding="utf-8", errors="replace") as f:
                    text = f.read(REPORT_LIMIT)
            parsed = parse_catch_xml(text)
            parsed.records = None
            if records:   # what the tested code wrote: regular files, never through a link
                parsed.records = read_launch_records(records)
        return parsed, r

    def reference_records(self, prefix, exe, extra):
        """(records, skipped) of the reference build's binary for exe's cases (its CPU or
        its GPU cases, as extra says; under mpirun with as many ranks as prefix starts) on
        this grade's seed, run once, as it is (trusted code); skipped: its GPU cases could
        not run here."""
        gpu = "--require-gpu" in extra
        key = (self.checked[exe], gpu, tuple(prefix))
        if key not in self._reference_records:
            with Launch(Unconfined()) as launch:
                report, _ = launch.report()
                records, _ = launch.file("record.txt")
                args = [*prefix, key[0], "-o", report, *extra, "-r", "xml",
                        "--rng-seed", str(self.seed), "[gpu]" if gpu else "~[gpu]"]
                r = run(args, self.timeout, dict(self.env, **{RECORD_ENV: records}), self.workdir)
                self._reference_records[key] = (read_launch_records(records),
                                                gpu and r.rc == SKIP_STATUS and not self.gpu_expected)
        return self._reference_records[key]

    def expected_cases(self, prefix, exe, filt, expected):
        """The cases a launch of filt must report: those of the binary's sources that filt
        selects (the binary can neither add nor hide one, nor change its points), or the
        binary's own listing where its sources are unknown (a pre-built tree)."""
        if expected:
            return [(n, t) for n, t in expected if selects(filt, t)]
        return self.list_cases(prefix, exe, filt)

    def run_catch(self, prefix, exe, filt, kind, extra=(), expected=None):
        """Every case `filt` selects, as Cases. Exit status 77 of a GPU launch (extra has
        --require-gpu) on a machine where no GPU run is expected turns them into skips;
        anywhere else it is an exit like any other. expected: [(name, tags)] of the
        binary's sources (see expected_cases); every one of them gets an outcome."""
        report, r = self._launch(prefix, exe, filt, extra)
        if r.rc == SKIP_STATUS and not r.timed_out and "--require-gpu" in extra \
                and not self.gpu_expected:
            reason = next((ln.strip() for ln in r.stdout.splitlines() if "SKIP" in ln.upper()),
                          r.stdout.strip() or "skipped (exit status 77)")
            reason = re.sub(r"^SKIPPED:\s*", "", reason)
            return [Case(n, t, "skipped", reason, kind=kind)
                    for n, t in self.expected_cases(prefix, exe, filt, expected)]
        listed = self.expected_cases(prefix, exe, filt, expected) if expected else None
        cases, alone = [], None   # alone: the one case a launch ran, if so
        while True:
            got = self._cases_of(report, r, kind)
            if report.records is not None:
                reference, skipped = self.reference_records(prefix, exe, extra)
                got = judge(got, report.records, reference)
            else:
                skipped = False
            if "--require-gpu" in extra and (skipped or not self.gpu_possible):
                for c in got:
                    if c.status == "passed":
                        c.status = "failed"
                        c.output = ("reported as passed, but no GPU test can run here (no CUDA "
                                    "backend, or the reference build's GPU tests were skipped)")
            cases += got
            whole = report.complete and not r.timed_out and r.rc >= 0
            if whole and alone is None:
                break
            # The launch ended early: the case it was in fails; the rest run again.
            if listed is None:
                listed = self.expected_cases(prefix, exe, filt, expected)
            seen = {c.name for c in cases}
            why = r.why_incomplete(self.timeout_text)
            tail = "\n" + r.tail() if r.tail() else ""
            if not whole and report.started and report.started[0] not in seen:
                name, tags = report.started
                cases.append(Case(name, tags, "failed", why + tail, r.seconds, kind))
                seen.add(name)
            if not whole and not (report.cases or report.started):   # ended before a case began
                if alone or r.timed_out:
                    # Run alone, it still ended first: another rank failed inside it before
                    # rank 0 began it, or the program cannot start (then every case fails
                    # alone). A launch that timed out is not repeated case by case.
                    before = r.why_incomplete(self.timeout_text, inside=False)
                    for n, t in listed:
                        if n not in seen and (n == alone or not alone):
                            cases.append(Case(n, t, "failed",
                                              f"{before} before this test case began{tail}",
                                              kind=kind))
                            seen.add(n)
                elif any(n not in seen for n, _ in listed):
                    # Under mpirun another rank can end the launch in the first case before
                    # rank 0 reports it began: that case runs alone to find out.
                    alone = next(n for n, _ in listed if n not in seen)
                    report, r = self._launch(prefix, exe, name_filter([alone]), extra)
                    continue
            alone = None
            rest = [n for n, _ in listed if n not in seen]
            if not rest:
                break
            report, r = self._launch(prefix, exe, name_filter(rest), extra)
        if listed is not None:   # after a relaunch: every listed case must have an outcome
            seen = {c.name for c in cases}
            cases += [Case(n, t, "failed", "not reported by any launch of this binary", kind=kind)
                      for n, t in listed if n not in seen]
        if expected:
            cases = self._only_expected(cases, listed, exe, kind)
        if r.rc != 0 and cases and all(c.status == "passed" for c in cases):
            # Failed without a failing case to show for it: never let that pass silently.
            cases.append(Case(f"{os.path.basename(exe)} {filt} (whole run)", "", "failed",
                              f"{r.why_incomplete(self.timeout_text)}\n{r.tail()}", kind=kind))
        return cases

    @staticmethod
    def _only_expected(cases, listed, exe, kind):
        """The reported cases the sources have, with the sources' tags (a report cannot
        change a case's points or task); cases the sources do not have earn nothing: one
        failed line of no points names them."""
        tags = dict(listed)
        known = [c for c in cases if c.name in tags]
        for c in known:
            c.tags = tags[c.name]
        unknown = sorted({c.name for c in cases if c.name not in tags})
        if unknown:
            shown = ", ".join(repr(n) for n in unknown[:3]) + \
                (f" and {len(unknown) - 3} more" if len(unknown) > 3 else "")
            known.append(Case(f"{os.path.basename(exe)} (cases not in its sources)", "", "failed",
                              f"the report names {len(unknown)} test case(s) that the test "
                              f"sources do not have: {shown}; they earn nothing", kind=kind))
        return known

    @staticmethod
    def _cases_of(report, r, kind):
        """The launch's reported cases. Each case's time is its share of the launch's wall
        time (start-up, mpirun and the ranks' set-up included), not only what Catch2
        measured inside it, so that JUnit's times add up to the time grading took."""
        cases = [Case(c["name"], c["tags"], "passed" if c["success"] else "failed",
                      c["output"], c["seconds"], kind) for c in report.cases]
        overhead = r.seconds - sum(c.seconds for c in cases)
        if cases and overhead > 0:
            for c in cases:
                c.seconds += overhead / len(cases)
        if r.timed_out:   # Catch2 reports the case SIGTERM interrupted: say why it came
            for c in cases:
                if c.status == "failed" and "SIGTERM" in c.output:
                    c.output = f"{r.why_incomplete(self.timeout_text)}\n{c.output}"
        return cases

    def forged(self, prefix, exe, expected, only, kind):
        """A decoy launch: a filter that names no case (a random name). Catch2 reports no
        case and a whole report; a binary whose code writes its own report (a forgery:
        all cases passed, whatever it was asked) reports cases there, and then every case
        of it fails. Returns those failed Cases, or None when the decoy reported none."""
        if not (self.decoy and expected):
            return None
        report, _ = self._launch(prefix, exe, name_filter([secrets.token_hex(8)]), [])
        if not report.cases:   # a crash or silence here: the launches of its cases say so
            return None
        why = (f"the report of this binary cannot be trusted: asked to run no test case, it "
               f"reported {len(report.cases)}; none of its cases is graded")
        return [Case(n, t, "failed", why, kind=kind if kind == "mpi" else
                     "gpu" if "[gpu]" in t else "cpu")
                for n, t in expected if selects(only, t)]

    def run_binary(self, exe, only="", expected=None):
        """only: a filter of the cases this binary runs (see cases_filter); expected: the
        cases of its sources (see run_catch)."""
        void = self.forged([], exe, expected, only, "cpu")
        if void is not None:
            return void
        cases = self.run_catch([], exe, only + "~[gpu]", "cpu", expected=expected)
        return cases + self.run_catch([], exe, only + "[gpu]", "gpu", extra=["--require-gpu"],
                                      expected=expected)

    def run_mpi_binary(self, exe, only="", expected=None):
        if not self.mpirun:
            return [Case(f"{os.path.basename(exe)} (mpirun)", "", "failed",
                         "mpirun not found: install Open MPI (tools/install-deps)", kind="mpi")]
        void = self.forged(self.mpi_prefix(MPI_WORLD_SIZES[0]), exe, expected, only, "mpi")
        if void is not None:
            return void
        out = []
        for filt, extra in ((only + "~[gpu]", []), (only + "[gpu]", ["--require-gpu"])):
            runs = [(n, self.run_catch(self.mpi_prefix(n), exe, filt, "mpi", extra=extra,
                                       expected=expected))
                    for n in MPI_WORLD_SIZES]
            out += merge_mpi_runs(runs)
        return out


def merge_mpi_runs(runs):
    """A multi-rank case passes only when it passed in every run (2 and 3 ranks); a case
    a run did not report counts as failed there. Skipped in any run: skipped."""
    order, by_name = [], {}
    for nprocs, cases in runs:
        for c in cases:
            if c.name not in by_name:
                order.append(c.name)
                by_name[c.name] = {}
            by_name[c.name][nprocs] = c
    merged = []
    for name in order:
        per_run = by_name[name]
        first = next(iter(per_run.values()))
        statuses, notes = [], []
        for nprocs, _ in runs:
            c = per_run.get(nprocs)
            status = c.status if c else "failed"
            statuses.append(status)
            if status != "passed":
                notes.append(f"-np {nprocs}: {status}" +
                             (f"\n{c.output}" if c and c.output else " (not reported by this run)"
                              if not c else ""))
        status = ("skipped" if "skipped" in statuses else
                  "passed" if all(s == "passed" for s in statuses) else "failed")
        if status == "skipped":
            notes = [next(c.output for c in per_run.values() if c.status == "skipped")]
        merged.append(Case(name, first.tags, status, "\n".join(notes),
                           sum(c.seconds for c in per_run.values()), "mpi"))
    return merged
