"""Confining a submission's test launches and its build. Each runs in namespaces of its
own: no network but the loopback device (which Open MPI's launcher needs), its own mounts
and its own process ids (whatever it leaves running dies with it). Where the grader is
root it runs as uid 65534 (nobody); elsewhere as the grading user inside a user
namespace, with no capabilities. Its root file system is its own (sandbox_root.py): the
system's programs and libraries of an allow-list, read-only, and nothing else of the
machine; the test binary and the course's mpirun are files of its launch folder, which is
its working folder; its writable places are a tmpfs that goes with it, of the size of its
disk budget. After the launch the files the grader reads (its report, its records) are
copied out. Limits bound the memory of the whole launch (budgets.py; RLIMIT_DATA, what
a process allocates, not the address space a GPU driver reserves, bounds each process),
the size of each file it writes (RLIMIT_FSIZE), core dumps and, as uid 65534, its
processes."""
import os
import shlex
import shutil
import tempfile

from .budgets import LaunchWatch
from .process import run
from .sandbox_root import (copy_out_lines, disk_check_lines, disk_exceeded, inside_allowed,
                           root_lines)

NOBODY = 65534
MIB = 1 << 20
OUT_FD = 9   # the launch's descriptor of its folder on the grader's side (see wrap)


def _tools():
    found = {t: shutil.which(t) or next((p for p in (f"/usr/sbin/{t}", f"/sbin/{t}")
                                         if os.access(p, os.X_OK)), None)
             for t in ("unshare", "setpriv", "prlimit", "mount", "umount", "pivot_root", "ip")}
    missing = [t for t, p in found.items() if not p]
    return found, missing


def _inside(path, folder):
    """Whether `path` is inside `folder` (or is it)."""
    return os.path.commonpath([path, folder]) == folder


def _deepest_first(folders):
    folders = {os.path.realpath(h) for h in folders if os.path.isdir(h)} - {"/", "/tmp"}
    return sorted(folders, key=lambda h: (-h.count(os.sep), h))


def _shadow_tree(source, shadow):
    """A copy of the folder `source` whose files are empty, with the names, modes and times
    of the originals (a build tool that compares times sees nothing changed); its links
    are the same links."""
    for top, dirs, files in os.walk(source):
        rel = os.path.relpath(top, source)
        here = os.path.normpath(os.path.join(shadow, rel))
        os.makedirs(here, exist_ok=True)
        for name in files + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
            path = os.path.join(top, name)
            out = os.path.join(here, name)
            if os.path.islink(path):   # a link is the same link (meson.build files are)
                os.symlink(os.readlink(path), out)
                continue
            if not os.path.isfile(path):
                continue
            open(out, "w").close()
            st = os.stat(path)
            os.chmod(out, st.st_mode & 0o755 | 0o444)
            os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
        st = os.stat(top)
        os.chmod(here, 0o755)
    for top, dirs, _ in os.walk(source, topdown=False):   # folders' times after their files
        here = os.path.normpath(os.path.join(shadow, os.path.relpath(top, source)))
        st = os.stat(top)
        os.utime(here, ns=(st.st_atime_ns, st.st_mtime_ns))


class Launch:
    """One launch's folder on the grader's side: the files the launch leaves for the
    grader (its report, its records) are copied there when it ends. The new root's
    mount point is its folder root/; inside, the launch works in a folder of the same
    path on its own tmpfs."""

    def __init__(self, confinement):
        self.confinement = confinement
        self.folder = tempfile.mkdtemp(prefix="mgpu-launch-",
                                       dir="/tmp" if confinement.active else None)
        self.outputs = []
        if confinement.active:
            os.mkdir(os.path.join(self.folder, "root"), 0o700)

    def report(self):
        """(the report's path here, the path the launched code writes it to)."""
        return self.file("report.xml")

    def file(self, name):
        """(the path here of a file the launched code writes, the path it writes to)."""
        self.outputs.append(name)
        path = os.path.join(self.folder, name)
        return path, (name if self.confinement.active else path)

    def command(self, argv, programs):
        """argv as this launch runs it; programs: the paths in argv of files it executes
        (the test binary, mpirun), which a confined launch reaches as ./NAME."""
        if not self.confinement.active:
            return list(argv)
        binds, inside = [], {}
        for path in programs:
            name = os.path.basename(path)
            binds.append((path, os.path.join(self.folder, name)))
            inside[path] = "./" + name
        return self.confinement.wrap(self, binds, [inside.get(a, a) for a in argv])

    def close(self):
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Confinement:
    """How a submission's test launches run. active: confined at all; as_nobody: as uid
    65534; note: one line for the report's header saying how (or why not)."""

    UNCONFINED = "The tests run UNCONFINED, with the network and as the grading user: "

    def __init__(self, hidden=(), memory_mb=8192, file_mb=1024, disk_mb=1024):
        # hidden: folders never to be seen (the course's checkout, the class, the grading
        # user's home). Outside the allow-list nothing is seen anyway; one inside it (a
        # checkout under /usr/local) is covered. Deepest first, as they are mounted.
        self.hidden = _deepest_first(hidden)
        self.memory_mb, self.file_mb, self.disk_mb = memory_mb, file_mb, disk_mb
        self.active, self.as_nobody = False, False
        self.tools, missing = _tools()
        if missing:
            self.note = (self.UNCONFINED + f"{', '.join(missing)} not installed "
                         "(util-linux, iproute2).")
            return
        self.as_nobody = os.geteuid() == 0
        self.active = True
        why = self.probe()
        if why and self.as_nobody:   # root in a container that forbids what root needs
            self.as_nobody, why_root = False, why
            why = self.probe()
            why = why and f"{why_root}; in a user namespace: {why}"
        if why:
            self.active = self.as_nobody = False
            self.note = self.UNCONFINED + f"namespaces do not work here ({why})."
            return
        who = "as uid 65534" if self.as_nobody else "as the grading user without capabilities"
        self.note = (f"The tests run confined: {who}, without network, in a root of their own "
                     "that holds the system's programs and libraries alone (none of the "
                     f"course, the submission or the machine's homes), {self.budgets()} "
                     "(see docs/instructors.md).")

    def budgets(self):
        """The per-launch budgets in words."""
        words = [f"memory {self.memory_mb} MiB" if self.memory_mb else "no memory budget",
                 f"disk {self.disk_mb} MiB (its folder, /tmp and /dev/shm)" if self.disk_mb
                 else "disk: as much as the machine's memory holds",
                 f"files {self.file_mb} MiB each" if self.file_mb else "files of any size"]
        return "each launch with " + ", ".join(words)

    def probe(self):
        """None when a confined launch works here, else why not (the last line it printed)."""
        with Launch(self) as launch:
            true = shutil.which("true") or "/bin/true"
            cmd = launch.command([true], [true])
            r = run(cmd[:-1] + ["sh", "-c", "id -u; ls -A /tmp | wc -l; cat /proc/net/dev"], 60)
        lines = r.stdout.split("\n")
        if r.rc != 0:
            return (r.stderr.strip().splitlines() or [f"exit status {r.rc}"])[-1]
        want = str(NOBODY) if self.as_nobody else "0"
        if lines[0].strip() != want or lines[1].strip() != "1":   # its own folder alone
            return f"the launch ran as uid {lines[0].strip()} with a /tmp of {lines[1].strip()} entries"
        if any(":" in ln and ln.split(":")[0].strip() not in ("lo", "Inter-|", "face |")
               for ln in lines[2:]):
            return "the launch sees network devices besides the loopback device"
        return None

    def disk_kib(self):
        """The size of a launch's tmpfs: its disk budget and a MiB more (a launch that fills
        it is over its budget), or half the memory (tmpfs's default) without a budget."""
        return (self.disk_mb + 1) << 10 if self.disk_mb else \
            os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2048

    def watch(self):
        """What process.run polls during a launch (budgets.LaunchWatch), or None."""
        if not (self.memory_mb or self.active and self.disk_mb):
            return None
        return LaunchWatch(self.memory_mb, self.disk_mb if self.active else 0,
                           self.disk_kib() << 10)

    def over_budget(self, r):
        """A launch whose last words are the disk check's (sandbox_root.disk_check_lines)
        was over its budget: it failed, whatever its exit status."""
        if self.active and self.disk_mb and not r.stopped and \
                disk_exceeded(self.disk_mb) in r.stderr[-500:]:
            r.rc, r.stopped = -9, disk_exceeded(self.disk_mb)
        return r

    def _script(self, folder, steps, tail):
        """The unshare command whose shell builds the launch's root in `folder` (with the
        steps of sandbox_root.root_lines), runs "$@" there under the limits, then the
        lines of tail."""
        t = {k: shlex.quote(v) for k, v in self.tools.items()}
        lines = ["set -e", f"{t['ip']} link set lo up"]
        lines += root_lines(os.path.join(folder, "root"), self.disk_kib(), folder, steps,
                            owner=f"{NOBODY}:{NOBODY}" if self.as_nobody else None,
                            tools=self.tools)
        lines.append("set +e")
        limits = ["--core=0"]
        if self.memory_mb:
            limits.append(f"--data={self.memory_mb * MIB}")
        if self.file_mb:
            limits.append(f"--fsize={self.file_mb * MIB}")
        user = []
        if self.as_nobody:
            limits.append("--nproc=4096")
            user = [f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        drop = ["--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
        # The shell is the namespace's first process: it waits for the command and passes
        # on its exit status (128 + N for signal N); when it ends, everything left is killed.
        lines.append(" ".join([t["prlimit"], *limits, "--", t["setpriv"], *user, *drop, "--",
                               '"$@"', f"{OUT_FD}<&-"]))
        lines += ["rc=$?", *tail, "exit $rc"]
        unshare = [self.tools["unshare"], *([] if self.as_nobody else ["--user", "--map-root-user"]),
                   "--net", "--mount", "--pid", "--fork", "--mount-proc", "--propagation", "private"]
        return unshare + ["sh", "-c", "\n".join(lines), "sh"]

    def covers(self, binds):
        """Steps that hide the hidden folders lying inside the allow-list (a checkout under
        /usr/local), before the binds: mode 711 where a bind lies inside one, so that its
        path can be walked, else 000."""
        return [("cover", "711" if any(_inside(dst, h) for _, dst in binds) else "000", h)
                for h in self.hidden if inside_allowed(h)]

    def wrap(self, launch, binds, argv):
        """The command that runs argv confined, in the launch's folder, with each (path,
        inside) of binds there read-only; its outputs are copied out after."""
        folder = launch.folder
        steps = self.covers(binds) + [("ro", src, dst) for src, dst in binds]
        tail = copy_out_lines(launch.outputs, OUT_FD) + \
            (disk_check_lines(self.disk_mb) if self.disk_mb else [])
        cmd = self._script(folder, steps, tail)
        # The folder stays open (descriptor OUT_FD) for that copy: nothing of the machine's
        # own root is reachable from the new one, and the command itself never has it.
        cmd[-2] = f"exec {OUT_FD}<{shlex.quote(folder)}\n" + cmd[-2]
        return cmd + list(argv)

    def build_command(self, folder, argv, course, build):
        """The command that runs a build of the submission's code (argv: ninja) confined,
        from the launch folder `folder`: as the tests run (no network, not as root, a root
        of its own, the same limits), seeing the clean copy `course` (read-only) and its
        build `build`, but not the reference: the clean copy's solutions/ are files of the
        same names and times with nothing in them (the compiler cannot read them, e.g.
        with asm(".incbin"); ninja sees them unchanged), the build's solutions/ (the
        reference binaries) are empty. Everything the build needs from solutions/ is built
        beforehand, outside (see building.py)."""
        shadow = os.path.join(folder, "solutions")
        _shadow_tree(os.path.join(course, "solutions"), shadow)
        binds = [(course, course), (build, build)]
        steps = self.covers(binds) + [("ro", course, course), ("rw", build, build),
                                      ("ro", shadow, os.path.join(course, "solutions"))]
        reference = os.path.join(build, "solutions")
        if os.path.isdir(reference):
            steps.append(("cover", "000", reference))
        return self._script(folder, steps, []) + list(argv)

    def env(self, env):
        """The environment of a confined launch: its home and temporary folder are /tmp."""
        if not self.active:
            return env
        env = dict(env)
        env.update(HOME="/tmp", TMPDIR="/tmp")
        for name in ("PWD", "OLDPWD"):
            env.pop(name, None)
        return env

    @staticmethod
    def status(rc):
        """A confined launch's exit status as the test's own: 128 + N is signal N."""
        return -(rc - 128) if 128 < rc < 128 + 65 else rc


class Unconfined(Confinement):
    """Launches as they are (the learner's own tests, the reference): nothing hidden."""

    def __init__(self):   # nothing to probe: no tool is used
        self.hidden, self.active, self.as_nobody, self.note = [], False, False, ""

    def watch(self):
        return None

    @staticmethod
    def status(rc):
        return rc
