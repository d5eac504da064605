"""What the PyTorch twins (gpt_torch.py, moe_torch.py) share: PyTorch from Debian's
interpreter, and the safetensors files the course's programs export, read directly (an
8-byte header size, a JSON header, the raw little-endian data) so that the `safetensors`
package is not needed."""
import json
import os
import sys

SYSTEM_PYTHON = "/usr/bin/python3"


def import_torch(reexec_flag):
    """torch; started by an interpreter without it, runs the script again under
    /usr/bin/python3 (Debian's python3-torch) once (`reexec_flag` names the environment
    variable that marks the second start); where none has PyTorch, exits 77 (skipped)."""
    try:
        import torch
        return torch
    except ImportError:
        if (os.path.exists(SYSTEM_PYTHON) and os.path.realpath(sys.executable) != os.path.realpath(SYSTEM_PYTHON)
                and not os.environ.get(reexec_flag)):
            os.environ[reexec_flag] = "1"
            os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON] + sys.argv)
        print("SKIPPED: PyTorch is not importable here (Debian: apt-get install python3-torch, "
              "then run this with /usr/bin/python3); nothing to compare")
        sys.exit(77)


def read_safetensors(path):
    """(tensors by name, metadata) of a safetensors file."""
    import torch
    dtypes = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "I32": torch.int32,
              "BF16": torch.bfloat16, "F16": torch.float16}
    with open(path, "rb") as f:
        data = f.read()
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + size])
    metadata = header.pop("__metadata__", {})
    base = 8 + size
    tensors = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        raw = bytearray(data[base + begin:base + end])
        dtype = dtypes[e["dtype"]]
        t = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        tensors[name] = t.reshape(e["shape"]).clone()
    return tensors, metadata
