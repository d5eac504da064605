#!/usr/bin/env python3
"""The digests that test_casts_torch.cpp compares mgpu's casts with: what PyTorch's casts
(Tensor.half(), .bfloat16(), .float()) make of a fixed set of bit patterns.

  /usr/bin/python3 tests/common/amp/torch_cast_digests.py     (needs python3-torch)

The patterns: every upper half of a float (all signs, exponents and leading mantissa bits)
with each of LOWS as its lower half (the bits f16 and bf16 round away: zero, the halfway
points 0x1000 and 0x8000 and their neighbours, all ones), 1,048,576 floats; and all 65536
16-bit values for the conversions back to float. A NaN result counts as one canonical
NaN (0x7E00, 0x7FC0, 0x7FC00000): NaN payloads are not part of the semantics and differ
between PyTorch's own code paths. Each digest is FNV-1a (64 bits) over the results'
little-endian bytes, in pattern order.
"""
import numpy as np
import torch

LOWS = [0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x2FFF,
        0x3000, 0x3001, 0x7FFF, 0x8000, 0x8001, 0xBFFF, 0xC000, 0xFFFF]


def fnv1a64(data: bytes) -> int:
    h = 1469598103934665603
    for byte in data:
        h = ((h ^ byte) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def main():
    hi = np.arange(65536, dtype=np.uint32)
    floats = np.concatenate([(hi << 16) | np.uint32(lo) for lo in LOWS])  # lows outer
    f = torch.from_numpy(floats.view(np.float32).copy())
    to_f16 = f.half()
    to_bf16 = f.bfloat16()
    bits16 = torch.from_numpy(np.arange(65536, dtype=np.uint16).view(np.int16).copy())
    from_f16 = bits16.view(torch.float16).float()
    from_bf16 = bits16.view(torch.bfloat16).float()

    def canon16(t, nan_bits):
        b = t.view(torch.int16).numpy().view(np.uint16).copy()
        b[torch.isnan(t.float()).numpy()] = nan_bits
        return b.astype("<u2").tobytes()

    def canon32(t):
        b = t.numpy().view(np.uint32).copy()
        b[np.isnan(t.numpy())] = 0x7FC00000
        return b.astype("<u4").tobytes()

    print(f"torch {torch.__version__}")
    print(f"f32 -> f16:  0x{fnv1a64(canon16(to_f16, 0x7E00)):016x}")
    print(f"f32 -> bf16: 0x{fnv1a64(canon16(to_bf16, 0x7FC0)):016x}")
    print(f"f16 -> f32:  0x{fnv1a64(canon32(from_f16)):016x}")
    print(f"bf16 -> f32: 0x{fnv1a64(canon32(from_bf16)):016x}")


if __name__ == "__main__":
    main()
