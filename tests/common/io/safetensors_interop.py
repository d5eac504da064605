#!/usr/bin/env python3
"""Interoperability of mgpu's safetensors writer and reader with the Python `safetensors`
package (the format's reference implementation, in Rust underneath).

  python3 tests/common/io/safetensors_interop.py --tool build/tests/common/io/safetensors_tool

Checks, each printed as ok/FAILED:
  1. a file the package writes (every dtype mgpu has, BF16 included; a 0-d and an empty
     tensor; metadata) is read by mgpu with identical names, dtypes, shapes and bytes;
  2. mgpu writes that same content back byte for byte identical to the package's file;
  3. the package reads mgpu's file with identical values, through safetensors.numpy too;
  4. malformed files: the package and mgpu refuse the same ones and accept the same edge
     cases, except where mgpu is stricter on purpose (listed, and checked to differ).
Needs `safetensors` and `numpy` (.ci/interop installs them in a venv). Without them it
prints why and exits 77, which meson reports as skipped. Last line: `N passed, M failed`.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import safetensors
    from safetensors import deserialize, serialize
    from safetensors.numpy import load_file, save_file
except ImportError as e:
    print(f"SKIPPED: the Python packages safetensors and numpy are needed ({e}); "
          ".ci/interop installs them in a virtual environment")
    sys.exit(77)

PASSED, FAILED = [], []


def check(name, ok, detail=""):
    (PASSED if ok else FAILED).append(name)
    print(f"{'ok    ' if ok else 'FAILED'}  {name}" + (f"\n        {detail}" if detail and not ok else ""))


def tool(args, *cmd):
    return subprocess.run([args.tool, *cmd], capture_output=True, text=True, timeout=60)


def le64(n):
    return struct.pack("<Q", n)


def raw(header, data=b""):
    h = header.encode() if isinstance(header, str) else header
    return le64(len(h)) + h + data


# ---- the content: every dtype mgpu has ---------------------------------------------------
def make_content():
    rng = np.random.default_rng(7)
    f32 = rng.standard_normal(4).astype(np.float32)
    bf16 = (rng.standard_normal(4).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    arrays = {  # name -> (safetensors dtype, numpy array holding the bytes)
        "layer.0.weight": ("F64", rng.standard_normal((2, 3))),
        "layer.0.bias": ("F32", f32),
        "half": ("F16", rng.standard_normal(3).astype(np.float16)),
        "brain": ("BF16", bf16.reshape(2, 2)),
        "step": ("I64", np.array(123456789012, dtype=np.int64)),      # 0-d
        "index": ("I32", np.arange(-2, 3, dtype=np.int32)),
        "empty": ("F32", np.zeros((0, 3), dtype=np.float32)),
    }
    return arrays


TORCHLIKE = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
             "I64": "int64", "I32": "int32"}


def package_serialize(arrays, metadata):
    """The package's raw writer (any dtype, BF16 included)."""
    specs = {}
    for name, (dt, a) in arrays.items():
        a = np.require(a, requirements="C")  # (ascontiguousarray would make a 0-d array 1-d)
        specs[name] = safetensors.TensorSpec(dtype=TORCHLIKE[dt], shape=list(a.shape),
                                             data_ptr=a.ctypes.data, data_len=a.nbytes)
    return serialize(specs, metadata=metadata)


def same_as_content(dumped, arrays):
    problems = []
    if set(dumped["tensors"]) != set(arrays):
        problems.append(f"names {sorted(dumped['tensors'])} != {sorted(arrays)}")
    for name, (dt, a) in arrays.items():
        t = dumped["tensors"].get(name)
        if t is None:
            continue
        if t["dtype"] != dt or t["shape"] != list(a.shape) or t["hex"] != a.tobytes().hex():
            problems.append(f"{name}: {t['dtype']}{t['shape']} {t['hex'][:32]}... != "
                            f"{dt}{list(a.shape)} {a.tobytes().hex()[:32]}...")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tool", required=True, help="path of build/tests/common/io/safetensors_tool")
    args = ap.parse_args()
    print(f"safetensors {safetensors.__version__}, numpy {np.__version__}")
    arrays = make_content()
    metadata = {"format": "pt"}  # one key: the package orders several keys by hash

    with tempfile.TemporaryDirectory(prefix="mgpu-interop-") as tmp:
        theirs, ours = os.path.join(tmp, "theirs.safetensors"), os.path.join(tmp, "ours.safetensors")
        their_bytes = package_serialize(arrays, metadata)
        with open(theirs, "wb") as f:
            f.write(their_bytes)

        # 1. mgpu reads the package's file.
        r = tool(args, "dump", theirs)
        dumped = json.loads(r.stdout) if r.returncode == 0 else None
        check("mgpu reads a file the package wrote (all six dtypes, 0-d, empty, metadata)",
              dumped is not None and not same_as_content(dumped, arrays) and
              dumped["metadata"] == metadata,
              r.stdout + r.stderr if dumped is None else "; ".join(same_as_content(dumped, arrays)))

        # 2. mgpu writes the same bytes.
        r = tool(args, "copy", theirs, ours)
        our_bytes = open(ours, "rb").read() if r.returncode == 0 else b""
        check("mgpu writes the same content byte for byte as the package", our_bytes == their_bytes,
              r.stderr or f"{our_bytes[:120]!r}\n        vs {their_bytes[:120]!r}")

        # 3. The package reads mgpu's file.
        back = {name: info for name, info in deserialize(our_bytes)} if our_bytes else {}
        ok = set(back) == set(arrays) and all(
            back[n]["dtype"] == dt and list(back[n]["shape"]) == list(a.shape) and
            bytes(back[n]["data"]) == a.tobytes() for n, (dt, a) in arrays.items())
        check("the package reads mgpu's file with identical dtypes, shapes and bytes", ok)

        # 3b. Through safetensors.numpy: numpy arrays in, numpy arrays out.
        np_arrays = {n: a for n, (dt, a) in arrays.items() if dt != "BF16"}
        np_theirs, np_ours = os.path.join(tmp, "np_theirs.safetensors"), os.path.join(tmp, "np_ours.safetensors")
        save_file(np_arrays, np_theirs)
        r = tool(args, "copy", np_theirs, np_ours)
        loaded = load_file(np_ours) if r.returncode == 0 else {}
        ok = set(loaded) == set(np_arrays) and all(
            loaded[n].dtype == a.dtype and loaded[n].shape == a.shape and np.array_equal(loaded[n], a)
            for n, a in np_arrays.items())
        check("safetensors.numpy loads mgpu's copy of its file with equal arrays", ok, r.stderr)
        check("... and mgpu's copy is byte-identical to safetensors.numpy's file",
              r.returncode == 0 and open(np_ours, "rb").read() == open(np_theirs, "rb").read())

        # 4. Malformed files: both refuse, both accept, or differ on purpose.
        cases = malformed_cases()
        for name, data, expect in cases:
            path = os.path.join(tmp, "case.safetensors")
            with open(path, "wb") as f:
                f.write(data)
            try:
                deserialize(data)
                package_ok = True
            except Exception:  # the package raises SafetensorError (or a JSON error)
                package_ok = False
            r = tool(args, "dump", path)
            mgpu_ok = r.returncode == 0
            if r.returncode not in (0, 3):
                check(f"malformed: {name}", False, f"the tool crashed: {r.returncode} {r.stderr}")
                continue
            if expect == "refuse":
                check(f"both refuse: {name}", not package_ok and not mgpu_ok,
                      f"package accepts: {package_ok}, mgpu accepts: {mgpu_ok} {r.stdout.strip()}")
            elif expect == "accept":
                check(f"both accept: {name}", package_ok and mgpu_ok,
                      f"package accepts: {package_ok}, mgpu: {r.stdout.strip()}")
            else:  # mgpu is stricter on purpose
                check(f"mgpu refuses, the package accepts ({expect}): {name}",
                      package_ok and not mgpu_ok, f"package accepts: {package_ok}, mgpu accepts: {mgpu_ok}")

    print(f"{len(PASSED)} passed, {len(FAILED)} failed")
    return 0 if not FAILED else 1


def malformed_cases():
    d16 = bytes(range(16))

    def e(name, dtype, shape, b, end):
        return f'"{name}":{{"dtype":"{dtype}","shape":{shape},"data_offsets":[{b},{end}]}}'

    return [
        ("shorter than 8 bytes", b"abc", "refuse"),
        ("header length over 100 MB", le64(100_000_001) + b"{}", "refuse"),
        ("header past the end", le64(100) + b"{}      ", "refuse"),
        ("invalid UTF-8", raw(b'{"\xff":1}'), "refuse"),
        ("not JSON", raw('{"w":'), "refuse"),
        ("NUL padding", raw(b"{}\x00\x00\x00\x00\x00\x00"), "refuse"),
        ("missing data_offsets", raw('{"w":{"dtype":"F32","shape":[4]}}', d16), "refuse"),
        ("negative dimension", raw("{" + e("w", "F32", "[-4]", 0, 16) + "}", d16), "refuse"),
        ("metadata value not a string", raw('{"__metadata__":{"epoch":3}}'), "refuse"),
        ("unknown dtype", raw("{" + e("w", "Q7", "[16]", 0, 16) + "}", d16), "refuse"),
        ("offsets reversed", raw("{" + e("w", "F32", "[2]", 8, 0) + "}", d16), "refuse"),
        ("overlap", raw("{" + e("a", "F32", "[2]", 0, 8) + "," + e("b", "F32", "[2]", 4, 12) + "}",
                        d16[:12]), "refuse"),
        ("hole", raw("{" + e("a", "F32", "[1]", 0, 4) + "," + e("b", "F32", "[2]", 8, 16) + "}", d16),
         "refuse"),
        ("past the end", raw("{" + e("w", "F32", "[4]", 0, 16) + "}", d16[:8]), "refuse"),
        ("byte length", raw("{" + e("w", "F32", "[3]", 0, 16) + "}", d16), "refuse"),
        ("trailing data", raw("{" + e("w", "F32", "[2]", 0, 8) + "}", d16), "refuse"),
        ("size overflow", raw("{" + e("w", "F64", "[4611686018427387904,8]", 0, 16) + "}", d16), "refuse"),
        ("metadata null", raw('{"__metadata__":null,' + e("w", "F32", "[4]", 0, 16) + "}", d16), "accept"),
        ("unpadded header, any order, empty tensors",
         raw("{" + e("b", "F32", "[2]", 8, 16) + "," + e("z", "F16", "[3,0]", 16, 16) + "," +
             e("a", "F32", "[2]", 0, 8) + "}\n\t ", d16), "accept"),
        ("0-d tensor", raw("{" + e("s", "F32", "[]", 0, 4) + "}", d16[:4]), "accept"),
        ("empty header", raw("{}"), "accept"),
        ("U8 (valid safetensors; mgpu has no such dtype)",
         raw("{" + e("w", "U8", "[16]", 0, 16) + "}", d16), "no u8 dtype in mgpu"),
        ("the same name twice, same offsets",
         raw("{" + e("w", "F32", "[4]", 0, 16) + "," + e("w", "F32", "[4]", 0, 16) + "}", d16),
         "duplicate names are refused"),
    ]


if __name__ == "__main__":
    sys.exit(main())
