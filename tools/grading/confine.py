"""Confining a submission's test launches. Each launch runs in namespaces of its own: no
network but the loopback device (which Open MPI's launcher needs), its own mounts and its
own process ids (whatever it leaves running dies with it). Where the grader is root it
runs as uid 65534 (nobody); elsewhere as the grading user inside a user namespace, with
no capabilities. It sees none of the course: empty file systems cover the clean copy and
its build (the course's solutions/ and reference binaries with them), the course's
checkout, the submission and the folder that holds it (the class), and the grading
user's home; the test binary and the course's mpirun reach it as files of its own launch
folder, which is its working folder, and its /tmp is a folder of that launch, removed
after it (its /dev/shm is its own too). Limits bound its memory (RLIMIT_DATA: what it allocates, not the address space
a GPU driver reserves), the size of each file it writes (RLIMIT_FSIZE), core dumps and,
as uid 65534, its processes."""
import os
import shlex
import shutil
import tempfile

from .process import run

NOBODY = 65534
MIB = 1 << 20


def _tools():
    found = {t: shutil.which(t) or next((p for p in (f"/usr/sbin/{t}", f"/sbin/{t}")
                                         if os.access(p, os.X_OK)), None)
             for t in ("unshare", "setpriv", "prlimit", "mount", "ip")}
    missing = [t for t, p in found.items() if not p]
    return found, missing


def _inside(path, folder):
    """Whether `path` is inside `folder` (or is it)."""
    return os.path.commonpath([path, folder]) == folder


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
    """One launch's folder: the report is written there, programs are reached there."""

    def __init__(self, confinement):
        self.confinement = confinement
        # A confined launch's folder is in /tmp, which the launch's own /tmp replaces: it
        # is mounted again at its path there (Open MPI reaches ./NAME by that path).
        self.folder = tempfile.mkdtemp(prefix="mgpu-launch-",
                                       dir="/tmp" if confinement.active else None)
        if confinement.active:
            os.mkdir(os.path.join(self.folder, "tmp"), 0o700)
            if confinement.as_nobody:
                for path in (self.folder, os.path.join(self.folder, "tmp")):
                    os.chown(path, NOBODY, NOBODY)

    def report(self):
        """(the report's path here, the path the launched code writes it to)."""
        return self.file("report.xml")

    def file(self, name):
        """(the path here of a file the launched code writes, the path it writes to)."""
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
            open(os.path.join(self.folder, name), "w").close()
            binds.append((path, name))
            inside[path] = "./" + name
        return self.confinement.wrap(self.folder, binds, [inside.get(a, a) for a in argv])

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

    def __init__(self, hidden=(), memory_mb=8192, file_mb=1024):
        # Deepest first: a folder inside another is covered before the outer one hides it.
        folders = {os.path.realpath(h) for h in hidden if os.path.isdir(h)} - {"/", "/tmp"}
        self.hidden = sorted(folders, key=lambda h: (-h.count(os.sep), h))
        self.memory_mb, self.file_mb = memory_mb, file_mb
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
        limits = [f"memory {memory_mb} MiB" if memory_mb else "",
                  f"files {file_mb} MiB" if file_mb else ""]
        limits = ", ".join(x for x in limits if x) or "no memory or file size limit"
        who = "as uid 65534" if self.as_nobody else "as the grading user without capabilities"
        self.note = (f"The tests run confined: {who}, without network, seeing none of the course "
                     f"or the submission, a /tmp of their own ({limits} per process; see "
                     "docs/instructors.md).")

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

    def wrap(self, folder, binds, argv):
        """The command that runs argv confined, in `folder`, with each (path, name) of
        binds reached there as ./name."""
        t = {k: shlex.quote(v) for k, v in self.tools.items()}
        q = shlex.quote
        lines = ["set -e", f"cd {q(folder)}"]
        lines += [f"{t['mount']} --bind {q(path)} {q(name)}" for path, name in binds]
        lines += [f"{t['mount']} -t tmpfs -o size=4k,mode=000 none {q(h)}" for h in self.hidden]
        lines += [f"{t['mount']} --bind tmp /tmp", f"mkdir {q(folder)}",
                  f"{t['mount']} --no-canonicalize --rbind . {q(folder)}"]
        if os.path.isdir("/dev/shm"):
            # Its own /dev/shm too: process ids repeat across pid namespaces, so two launches
            # at once would name Open MPI's shared memory segments alike there.
            size = f"{self.memory_mb}m" if self.memory_mb else "50%"
            lines.append(f"{t['mount']} -t tmpfs -o mode=1777,size={size} none /dev/shm")
        lines += [f"{t['ip']} link set lo up", "set +e"]
        limits = ["--core=0"]
        if self.memory_mb:
            limits.append(f"--data={self.memory_mb * MIB}")
        if self.file_mb:
            limits.append(f"--fsize={self.file_mb * MIB}")
        if self.as_nobody:
            limits.append("--nproc=4096")
            user = [f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        else:
            user = []
        drop = ["--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
        # The shell is the namespace's first process: it waits for the test and passes on
        # its exit status (128 + N for signal N); when it ends, everything left is killed.
        lines.append(" ".join([t["prlimit"], *limits, "--", t["setpriv"], *user, *drop, "--",
                               '"$@"']))
        lines += ["rc=$?", "exit $rc"]
        unshare = [self.tools["unshare"], *([] if self.as_nobody else ["--user", "--map-root-user"]),
                   "--net", "--mount", "--pid", "--fork", "--mount-proc", "--propagation", "private"]
        return unshare + ["sh", "-c", "\n".join(lines), "sh"] + list(argv)

    def build_command(self, folder, argv, course, build, extra_hidden=()):
        """The command that runs a build of the submission's code (argv: ninja) confined,
        from the launch folder `folder`: as the tests run (no network, not as root, its own
        /tmp, the same limits), seeing the clean copy `course` and its build `build`, but
        not the reference: the clean copy's solutions/ are files of the same names and
        times with nothing in them (the compiler cannot read them, e.g. with
        asm(".incbin"); ninja sees them unchanged), the build's solutions/ (the reference
        binaries) are empty; the folders of `hidden` and extra_hidden (the course's
        checkout, the class, the grading user's home) are empty too. Everything the
        build needs from solutions/ is built beforehand, outside (see building.py)."""
        t = {k: shlex.quote(v) for k, v in self.tools.items()}
        q = shlex.quote
        shadow = os.path.join(folder, "solutions")
        _shadow_tree(os.path.join(course, "solutions"), shadow)
        hidden = sorted({os.path.realpath(h) for h in (*self.hidden, *extra_hidden)
                         if os.path.isdir(h)} - {"/", "/tmp"},
                        key=lambda h: (-h.count(os.sep), h))
        hidden = [h for h in hidden if h != course and not _inside(course, h)]
        lines = ["set -e", f"cd {q(folder)}", "mkdir course",
                 f"{t['mount']} --rbind {q(course)} course"]
        # A hidden folder that holds the clean copy can be passed through, not listed.
        lines += [f"{t['mount']} -t tmpfs -o size=4k,mode={'711' if _inside(course, h) else '000'} "
                  f"none {q(h)}" for h in hidden]
        lines += [f"{t['mount']} --bind tmp /tmp", f"mkdir -p {q(folder)}",
                  f"{t['mount']} --no-canonicalize --rbind . {q(folder)}"]
        # The clean copy back at its path, where a hidden folder or the /tmp of its own
        # covered it (a work folder in the course's checkout, or in /tmp).
        lines += [f"(umask 022; mkdir -p {q(course)})", f"{t['mount']} --rbind course {q(course)}",
                  f"{t['mount']} --bind solutions {q(os.path.join(course, 'solutions'))}"]
        reference = os.path.join(build, "solutions")
        if os.path.isdir(reference):
            lines.append(f"{t['mount']} -t tmpfs -o size=4k,mode=000 none {q(reference)}")
        lines += [f"{t['ip']} link set lo up", "set +e"]
        limits = ["--core=0"]
        if self.memory_mb:
            limits.append(f"--data={self.memory_mb * MIB}")
        if self.file_mb:
            limits.append(f"--fsize={self.file_mb * MIB}")
        user = [f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", ] \
            if self.as_nobody else []
        if self.as_nobody:
            limits.append("--nproc=4096")
        drop = ["--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
        lines.append(" ".join([t["prlimit"], *limits, "--", t["setpriv"], *user, *drop, "--",
                               '"$@"']))
        lines += ["rc=$?", "exit $rc"]
        unshare = [self.tools["unshare"], *([] if self.as_nobody else ["--user", "--map-root-user"]),
                   "--net", "--mount", "--pid", "--fork", "--mount-proc", "--propagation", "private"]
        return unshare + ["sh", "-c", "\n".join(lines), "sh"] + list(argv)

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

    @staticmethod
    def status(rc):
        return rc
