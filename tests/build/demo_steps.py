#!/usr/bin/env python3
"""The README's demo builds only what it uses: counts the commands ninja runs to build a target
from nothing (`ninja -t commands TARGET`, the same in a fresh configure as in a built tree) and
fails above a limit, with the steps by target, so that the demo's steps do not grow with the
number of lessons.

    demo_steps.py --build BUILD_DIR [--target solutions/05_ddp/train] [--limit 130]
"""
import argparse
import collections
import re
import shlex
import shutil
import subprocess
import sys


def output_of(command):
    """The file a build command writes (-o FILE, or an archiver's archive), or '?'."""
    words = shlex.split(command) if "'" in command or '"' in command else command.split()
    for i, w in enumerate(words[:-1]):
        if w == "-o":
            return words[i + 1]
    for w in words:
        if w.endswith(".a"):
            return w
    return "?"


def target_of(path):
    """The target a file belongs to: common/libmgpu_nn.a.p/x.o -> common/libmgpu_nn.a."""
    return re.sub(r"\.p/[^/]*$", "", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", required=True, help="the configured build folder")
    ap.add_argument("--target", default="solutions/05_ddp/train")
    ap.add_argument("--limit", type=int, default=130)
    ap.add_argument("--ninja", default=shutil.which("ninja") or shutil.which("samu") or "ninja")
    args = ap.parse_args()
    run = subprocess.run([args.ninja, "-C", args.build, "-t", "commands", args.target],
                         capture_output=True, text=True)
    if run.returncode != 0:
        print(f"error: ninja -t commands {args.target} failed: {run.stderr.strip()}")
        return 1
    commands = [c for c in run.stdout.splitlines() if c.strip()]
    by_target = collections.Counter(target_of(output_of(c)) for c in commands)
    nvcc = sum(1 for c in commands if re.search(r"(^|[\s/])nvcc\s", c))
    print(f"{args.target}: {len(commands)} build steps from nothing ({nvcc} of them nvcc), "
          f"limit {args.limit}")
    for target, n in sorted(by_target.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {n:4d}  {target}")
    if len(commands) > args.limit:
        print(f"FAILED: {args.target} takes {len(commands)} build steps, more than "
              f"{args.limit}: it builds more than it uses. A part of the library it links "
              "needs more than before ('needs' in common/src/*/meson.build), or lesson 05's "
              "entry names more parts ('library' in lessons/meson.build); the list above says "
              "which targets the steps build.")
        return 1
    print(f"ok: {len(commands)} <= {args.limit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
