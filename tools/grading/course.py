"""The course a submission is graded against: the files committed at git HEAD, never the
working tree, so that what an instructor changed or solved in their own checkout cannot
reach a student's grade. Outside a git checkout (a course unpacked from an archive) the
files on disk are the course."""
import os
import stat
import subprocess

SKIP_DIRS = {".git", "__pycache__", ".deps", ".whl"}


def is_build_dir(path):
    return os.path.exists(os.path.join(path, "build.ninja")) or \
        os.path.isdir(os.path.join(path, "meson-private"))


def walk(top):
    """Every file below top, relative to it, build folders and caches left out."""
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and
                             not d.startswith("build") and not is_build_dir(os.path.join(dirpath, d)))
        for f in filenames:
            yield os.path.relpath(os.path.join(dirpath, f), top)


def _git(root, *args, stdin=None):
    return subprocess.run(["git", "-C", root, *args], input=stdin, capture_output=True,
                          check=True).stdout


class Course:
    """files: the course's paths (sorted, relative); read(rel): a file's bytes; link(rel):
    a symbolic link's target, else None; mode(rel): its permission bits; source: where it
    came from, in words; uncommitted: tracked paths whose working-tree copy differs from
    the commit (reported, never used)."""

    def __init__(self, root):
        self.root = root
        self._data, self._mode, self._link = {}, {}, {}
        self.uncommitted = []
        try:
            listing = _git(root, "ls-tree", "-r", "-z", "--full-tree", "HEAD")
        except (OSError, subprocess.CalledProcessError):
            self._from_disk()
            return
        self.source = "git HEAD " + _git(root, "rev-parse", "--short", "HEAD").decode().strip()
        blobs = []
        for entry in listing.split(b"\0"):
            if not entry:
                continue
            meta, path = entry.split(b"\t", 1)
            mode, kind, sha = meta.split()
            if kind != b"blob":
                continue   # a submodule is not part of the course
            blobs.append((path.decode(), int(mode, 8), sha.decode()))
        contents = self._cat(root, [sha for _, _, sha in blobs])
        for (rel, mode, sha) in blobs:
            if stat.S_ISLNK(mode):
                self._link[rel] = contents[sha].decode()
            else:
                self._data[rel] = contents[sha]
                self._mode[rel] = 0o755 if mode & 0o111 else 0o644
        self.files = sorted(rel for rel, _, _ in blobs)
        status = _git(root, "status", "--porcelain", "-z", "--untracked-files=no")
        self.uncommitted = sorted(e[3:].decode() for e in status.split(b"\0") if len(e) > 3)

    @staticmethod
    def _cat(root, shas):
        """{sha: bytes} of every blob, read through one `git cat-file --batch`."""
        out = _git(root, "cat-file", "--batch", stdin="".join(s + "\n" for s in shas).encode())
        found, pos = {}, 0
        while pos < len(out):
            end = out.index(b"\n", pos)
            sha, _, size = out[pos:end].split()
            start = end + 1
            found[sha.decode()] = out[start:start + int(size)]
            pos = start + int(size) + 1
        return found

    def _from_disk(self):
        self.source = f"the files in {self.root} (not a git checkout)"
        self.files = sorted(walk(self.root))
        for rel in self.files:
            path = os.path.join(self.root, rel)
            if os.path.islink(path):
                self._link[rel] = os.readlink(path)
            else:
                with open(path, "rb") as f:
                    self._data[rel] = f.read()
                self._mode[rel] = os.stat(path).st_mode & 0o777

    def read(self, rel):
        return self._data[rel]

    def read_lines(self, rel):
        return self._data[rel].splitlines(keepends=True)

    def link(self, rel):
        return self._link.get(rel)

    def mode(self, rel):
        return self._mode.get(rel, 0o644)

    def uncommitted_note(self):
        """One line for the report when the checkout differs from what is graded, else None."""
        if not self.uncommitted:
            return None
        shown = ", ".join(self.uncommitted[:3]) + \
            (f" and {len(self.uncommitted) - 3} more" if len(self.uncommitted) > 3 else "")
        return (f"the course's checkout has uncommitted changes ({shown}); the clean copy "
                f"uses the committed course ({self.source}), never those changes")
