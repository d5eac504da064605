"""A confined launch's own root file system, built from an allow-list. Inside its mount
namespace the launch gets a fresh root, a size-limited tmpfs, into which the system's
programs and libraries are bound read-only at their own paths, with the few files its
launch needs (the test binary, the course's mpirun; for a build the clean copy and its
build folder); then pivot_root makes it the root and the machine's own root is detached.
Whatever the allow-list does not name (homes, checkouts, /srv, /var, /mnt, other /opt
folders, the machine's /tmp) is not there at all, rather than covered where known. The
launch's writable places, its folder, /tmp (and /var/tmp, a link to it) and /dev/shm, are
folders of that tmpfs: they go when the launch ends, and its size is the launch's disk
budget."""
import functools
import glob
import os
import shlex
import shutil

# The system paths a launch sees, read-only, and why each is there. A path this machine
# lacks is left out; a link (/bin -> usr/bin on merged-/usr systems) is the same link.
SYSTEM_PATHS = (
    ("/usr", "programs, compilers, libraries, headers (Catch2's), Open MPI's help files, "
             "the datasets under /usr/share and the CUDA toolkit under /usr/local"),
    ("/bin", "programs (a link into /usr where /usr is merged)"),
    ("/sbin", "programs (a link into /usr where /usr is merged)"),
    ("/lib", "the dynamic linker and libraries"),
    ("/lib32", "32-bit libraries, where installed"),
    ("/lib64", "the dynamic linker's path named in every x86-64 program"),
    ("/libx32", "x32 libraries, where installed"),
    ("/etc/ld.so.cache", "where the dynamic linker finds libraries"),
    ("/etc/ld.so.conf", "the dynamic linker's folders"),
    ("/etc/ld.so.conf.d", "the dynamic linker's folders"),
    ("/etc/alternatives", "the links behind /usr/bin/mpirun, c++, cc (Debian's alternatives)"),
    ("/etc/openmpi", "Open MPI's default settings"),
    ("/etc/nsswitch.conf", "how names of users and hosts are looked up"),
    ("/etc/passwd", "the name of the launch's user (Open MPI and the shell ask)"),
    ("/etc/group", "the name of the launch's group"),
    ("/etc/hosts", "localhost and this host's name, which Open MPI resolves"),
    ("/etc/host.conf", "how host names are resolved"),
    ("/etc/hostname", "this host's name"),
    ("/etc/localtime", "local time in logs"),
    ("/etc/timezone", "local time in logs"),
    ("/sys", "the hardware's layout, which Open MPI (hwloc) and the CUDA runtime read"),
)
# Device nodes of /dev, bound from the machine's; the GPUs' are added where present.
DEVICES = ("null", "zero", "full", "random", "urandom")
GPU_DEVICES = ("/dev/nvidia*", "/dev/nvidia-caps", "/dev/dri")
# Programs whose installation may live under /opt (a CUDA toolkit, a compiler): their
# prefix (the folder above their bin/) is added read-only, and nothing else of /opt.
TOOLKIT_PROGRAMS = ("nvcc", "c++", "cc", "g++", "gcc", "mpirun", "ninja", "ccache")

q = shlex.quote


@functools.lru_cache(maxsize=None)
def allowed_paths():
    """The system paths a launch sees: SYSTEM_PATHS this machine has, and the /opt prefixes
    of TOOLKIT_PROGRAMS (e.g. /opt/cuda for /opt/cuda/bin/nvcc). Looked up once."""
    paths = [p for p, _ in SYSTEM_PATHS if os.path.lexists(p)]
    for name in TOOLKIT_PROGRAMS:
        found = shutil.which(name)
        real = os.path.realpath(found) if found else ""
        prefix = os.path.dirname(os.path.dirname(real))
        if real.startswith("/opt/") and prefix != "/opt" and prefix not in paths:
            paths.append(prefix)
    return tuple(paths)


def inside_allowed(path):
    """Whether path lies in one of the system paths a launch sees (a folder there that
    must stay out of sight is covered)."""
    return any(os.path.commonpath([path, p]) == p for p in allowed_paths() if p != "/")


def devices():
    """The device nodes (and folders of them) a launch sees."""
    found = [f"/dev/{d}" for d in DEVICES if os.path.exists(f"/dev/{d}")]
    for pattern in GPU_DEVICES:
        found += sorted(p for p in glob.glob(pattern) if p not in found)
    return found


def _skeleton(binds):
    """Shell lines, run in the new root's folder, that make the mount points of binds
    ((kind, source, path inside)) in few commands (a launch starts faster): folders and
    empty files; a system path that is a link becomes the same link instead."""
    folders, files, lines = set(), [], []
    for kind, src, dst in binds:
        if kind == "cover" or os.path.isdir(src) and not (kind == "sys" and os.path.islink(src)):
            folders.add(dst)
            continue
        folders.add(os.path.dirname(dst))
        if kind == "sys" and os.path.islink(src):
            lines.append(f"ln -s {q(os.readlink(src))} .{q(dst)}")
        else:
            files.append(dst)
    folders = sorted(folders - {"/"})
    return ([f"mkdir -p {' '.join('.' + q(d) for d in folders)}"] if folders else []) + \
        ([f"touch {' '.join('.' + q(f) for f in files)}"] if files else []) + lines


def _mount(mount, kind, src, dst):
    """The command (mount: the mount program) that binds src at the new root's dst
    (read-only for "sys" and "ro"), or hides dst under an empty tmpfs (a "cover", whose
    src is its mode)."""
    if kind == "cover":
        return f"{mount} -t tmpfs -o size=4k,mode={src} none .{q(dst)}"
    how = "--bind" if kind == "dev" else "--rbind -o ro" if kind in ("sys", "ro") else "--rbind"
    return f"{mount} --no-canonicalize {how} {q(src)} .{q(dst)}"


def root_lines(root, size_kib, folder, steps=(), owner=None, tools=None):
    """Shell lines (run as the namespace's root, before the launch's own command) that
    build the new root at the empty folder `root` and enter it, ending in `folder`. steps:
    what is added after the system paths, in order: ("ro" or "rw", source, path inside)
    to bind read-only or writable, ("cover", mode, path) to hide a folder under an empty
    tmpfs; owner: 'uid:gid' of the launch's folder, where it runs as another user; tools:
    the paths of mount, umount and pivot_root (/usr/sbin is not on every user's PATH)."""
    t = {name: q((tools or {}).get(name) or name) for name in ("mount", "umount", "pivot_root")}
    binds = [("sys", p, p) for p in allowed_paths()] + \
        [("dev", d, d) for d in devices() if not os.path.isdir(d)] + \
        [("sys", d, d) for d in devices() if os.path.isdir(d)] + list(steps)
    writable = ["/tmp", "/dev/shm", folder]
    lines = [f"{t['mount']} -t tmpfs -o size={size_kib}k,mode=755 mgpu-launch {q(root)}",
             f"cd {q(root)}", *_skeleton(binds + [("cover", "", w) for w in writable]),
             "mkdir -p proc var .old", "chmod 1777 tmp dev/shm", "ln -s ../tmp var/tmp",
             "ln -s /proc/self/fd dev/fd",
             *(f"ln -s /proc/self/fd/{i} dev/{n}"
               for i, n in enumerate(("stdin", "stdout", "stderr"))),
             f"{t['mount']} --no-canonicalize --rbind /proc proc"]
    if owner:
        lines.append(f"chown {owner} .{q(folder)}")
    lines += [_mount(t["mount"], *b) for b in binds if not (b[0] == "sys" and os.path.islink(b[1]))]
    lines += [f"{t['pivot_root']} . .old", f"{t['umount']} -l /.old", "rmdir /.old",
              f"cd {q(folder)}"]
    return lines


def copy_out_lines(names, fd):
    """Shell lines that copy the launch's outputs `names` (and their per-rank files
    NAME.rankR) from its folder to the folder open as descriptor `fd`: regular files only,
    after every other process of the launch is killed (none can swap one while it is
    copied)."""
    globs = " ".join(f"{q(n)} {q(n)}.rank*" for n in names)
    return ["kill -s KILL -1 2>/dev/null",
            f"for f in {globs}; do",
            f"  if [ -f \"$f\" ] && [ ! -L \"$f\" ]; then cp -- \"$f\" /proc/self/fd/{fd}/; fi",
            "done"]


def disk_check_lines(budget_mib):
    """A shell line that says on standard error, in the words the grader looks for, when
    the launch's root (its tmpfs) holds more than its disk budget."""
    return ["set -- $(stat -f -c '%b %f %S' /)",
            f"if [ $(( ($1 - $2) * $3 )) -gt {budget_mib << 20} ]; then "
            f"echo {q(disk_exceeded(budget_mib))} >&2; fi"]


def disk_exceeded(budget_mib):
    """The words of a launch over its disk budget."""
    return (f"disk budget of {budget_mib} MiB exceeded (the launch's files, /tmp and /dev/shm "
            "in all; tools/grade --disk-limit sets it)")
