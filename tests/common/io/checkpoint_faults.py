#!/usr/bin/env python3
"""Damaged and odd checkpoints given to lesson 07's train program (the reference's): each is
refused with one clear line naming the file (and the tensor or counter) and a non-zero exit,
nothing hangs; a file written before checksums existed still resumes, with a note; a stale
temporary file of a killed save is removed by the next save.

  checkpoint_faults.py --train build/solutions/07_checkpointing/train
"""
import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

ARGS = ['--data', 'synthetic', '--train-samples', '512', '--epochs', '2', '--steps', '6']
FAILURES = []


def read_st(path):
    with open(path, 'rb') as f:
        raw = f.read()
    n = struct.unpack('<Q', raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop('__metadata__', {})
    data = raw[8 + n:]
    entries = sorted(header.items(), key=lambda kv: kv[1]['data_offsets'][0])
    tensors = [[k, v['dtype'], v['shape'], bytearray(data[v['data_offsets'][0]:v['data_offsets'][1]])]
               for k, v in entries]
    return tensors, meta


def write_st(path, tensors, meta):
    header = {'__metadata__': meta} if meta else {}
    off = 0
    for name, dtype, shape, b in tensors:
        header[name] = {'dtype': dtype, 'shape': shape, 'data_offsets': [off, off + len(b)]}
        off += len(b)
    text = json.dumps(header, separators=(',', ':')).encode()
    text += b' ' * (-len(text) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(text)) + text + b''.join(bytes(t[3]) for t in tensors))


def fnv(b):
    h = 14695981039346656037  # FNV-1a 64's offset basis
    for c in b:
        h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return '%016x' % h


def rechecksum(tensors, meta):
    for k in [k for k in meta if k.startswith('checksum.')]:
        del meta[k]
    for name, _, _, b in tensors:
        meta['checksum.' + name] = fnv(b)


def find(tensors, name):
    return next(t for t in tensors if t[0] == name)


def run(train, extra, timeout=120):
    try:
        p = subprocess.run([train] + ARGS + extra, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, 'timed out'
    return p.returncode, p.stdout + p.stderr


def expect(what, train, extra, ok, needles):
    rc, out = run(train, extra)
    good = rc is not None and (rc == 0) == ok and all(n in out for n in needles)
    print(('ok   ' if good else 'FAIL ') + what)
    if not good:
        FAILURES.append(what)
        print('  exit %s; expected %s and %s; output tail:\n%s' %
              (rc, 'success' if ok else 'failure', needles, '\n'.join(out.splitlines()[-6:])))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--train', required=True)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix='mgpu-ckfaults-')
    try:
        ck = os.path.join(tmp, 'ck')
        rc, out = run(a.train, ['--checkpoint-dir', ck, '--save-every', '4', '--keep-last', '0'])
        if rc != 0:
            print(out)
            return 1
        good = os.path.join(ck, 'step-00000008.safetensors')
        tensors, meta = read_st(good)
        assert any(k.startswith('checksum.') for k in meta), 'the checkpoint has no checksums'
        weight = next(t[0] for t in tensors if t[0].startswith('model.') and t[0].endswith('weight')
                      and t[1] == 'F32' and len(t[2]) == 2)
        momentum = next(t[0] for t in tensors if t[0].endswith('.momentum_buffer'))

        def variant(name, edit, checksums=True):
            ts, md = read_st(good)
            edit(ts, md)
            if checksums:
                rechecksum(ts, md)
            path = os.path.join(tmp, name)
            write_st(path, ts, md)
            return path

        def resume(path):
            return ['--resume', path]

        # Integrity: one flipped data byte.
        def flip(ts, md):
            find(ts, weight)[3][5] ^= 0x10
        p = variant('flipped.safetensors', flip, checksums=False)
        expect('a flipped byte fails its checksum', a.train, resume(p), False,
               [p, "'" + weight + "'", 'checksum'])
        # A tensor removed (the checksums say it was saved).
        p = variant('removed.safetensors', lambda ts, md: ts.remove(find(ts, momentum)), checksums=False)
        expect('a removed tensor is missing by its checksum', a.train, resume(p), False,
               [p, momentum, 'missing'])
        # Strict: a momentum buffer missing from a consistent file.
        p = variant('no_momentum.safetensors', lambda ts, md: ts.remove(find(ts, momentum)))
        expect('a missing momentum buffer is refused', a.train, resume(p), False,
               [p, momentum[len('optim.'):]])
        # Non-finite parameters.
        def nan(ts, md):
            find(ts, weight)[3][0:4] = struct.pack('<f', math.nan)
        p = variant('nan.safetensors', nan)
        expect('a NaN weight is refused', a.train, resume(p), False, [p, weight, 'NaN'])
        expect('a NaN weight loads with --allow-non-finite-checkpoint', a.train,
               resume(p) + ['--allow-non-finite-checkpoint'], True, ['resumed from ' + p])
        def inf_momentum(ts, md):
            find(ts, momentum)[3][0:4] = struct.pack('<f', math.inf)
        p = variant('inf.safetensors', inf_momentum)
        expect('an infinite momentum is refused', a.train, resume(p), False, [p, momentum, 'infinite'])
        # Training counters out of range.
        for key, value, needle in [('train.epoch', 99, 'train.epoch is 99'),
                                   ('train.epoch', -1, 'train.epoch is -1'),
                                   ('train.global_step', -5, 'train.global_step is -5'),
                                   ('train.step_in_epoch', 10**12, 'step_in_epoch 1000000000000'),
                                   ('train.step_in_epoch', -10**12, 'continues at step 1000000000000')]:
            def counter(ts, md, key=key, value=value):
                if value == -10**12:  # consistent counters, a step beyond the epoch's data
                    find(ts, 'train.global_step')[3][:] = struct.pack('<q', 10**12 + 1)
                    value = 10**12
                find(ts, key)[3][:] = struct.pack('<q', value)
            p = variant('counter.safetensors', counter)
            expect('%s=%d is refused' % (key, abs(value)), a.train, resume(p), False, [p, needle])
        # Shape mismatch names the file.
        def transpose(ts, md):
            t = find(ts, weight)
            t[2] = [t[2][1], t[2][0]]
        p = variant('shape.safetensors', transpose)
        expect('a shape mismatch names the file', a.train, resume(p), False, [p, weight[len('model.'):]])
        # Not regular files: a device, a FIFO, a symlink loop.
        expect('--resume /dev/zero is refused', a.train, resume('/dev/zero'), False,
               ['/dev/zero', 'character device'])
        fifo = os.path.join(tmp, 'fifo.safetensors')
        os.mkfifo(fifo)
        expect('a FIFO is refused', a.train, resume(fifo), False, [fifo, 'FIFO'])
        loop = os.path.join(tmp, 'loop.safetensors')
        os.symlink(loop, loop)
        expect('a symlink loop is refused', a.train, resume(loop), False, [loop, 'symlink loop'])
        # A file of before the checksums: resumes, with a note.
        p = variant('legacy.safetensors',
                    lambda ts, md: [md.pop(k) for k in [k for k in md if k.startswith('checksum.')]],
                    checksums=False)
        expect('a file without checksums resumes with a note', a.train, resume(p), True,
               ['resumed from ' + p, 'no checksums'])
        # A stale temporary file of a killed save is removed by the next save.
        stale = os.path.join(ck, '.step-00000012.safetensors.tmp.999999')
        with open(stale, 'wb') as f:
            f.write(b'half a checkpoint')
        expect('the run goes on after a stale temporary file', a.train,
               ['--checkpoint-dir', ck, '--resume', good, '--save-every', '4'], True, ['final:'])
        if os.path.exists(stale):
            FAILURES.append('stale temporary file removed')
            print('FAIL stale temporary file removed by the next save')
        else:
            print('ok   stale temporary file removed by the next save')
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print('%d failure(s)' % len(FAILURES))
    return 1 if FAILURES else 0


if __name__ == '__main__':
    sys.exit(main())
