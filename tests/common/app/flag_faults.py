#!/usr/bin/env python3
"""Wrong flags given to the programs: each is refused with one clear line that names the flag
and what to do instead, and a non-zero exit status; nothing hangs, nothing is half-run.

  flag_faults.py --build build [--mpirun tools/mpirun]

Checked: lessons 13-15's train and lesson 15's plan (counts, seeds, grid extents, a cluster
by hand: the validators of lesson 01's flags; plan's refusals one line and nothing else), a flag of two values given one (--betas 0.9 --train-samples 256, the shared flag
parsing, through lesson 10's train), lesson 09's what_if (rank lists, batches, a link by
hand), lesson 04's bench_allreduce (a message larger than memory, a world of one rank),
lesson 10's --gradient-as-bucket-view with ZeRO and lesson 08's loss-scaling flags where
no loss scaling runs.
"""
import argparse
import os
import subprocess
import sys

FAILURES = []
HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOAD = os.path.join(HERE, '..', '..', '09_time_cost', 'one_rank_steps.jsonl')


def run(cmd, timeout=120):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, 'timed out after %d s' % timeout
    return p.returncode, p.stdout + p.stderr


def expect_refused(name, cmd, texts, timeout=120, one_line=False):
    rc, out = run(cmd, timeout)
    problems = []
    if one_line and rc is not None and len(out.strip().splitlines()) != 1:
        problems.append('%d lines, not one' % len(out.strip().splitlines()))
    if rc is None:
        problems.append(out)
    elif rc == 0:
        problems.append('exit status 0')
    for t in texts:
        if rc is not None and t not in out:
            problems.append('no %r' % t)
    if rc is not None and any(w in out for w in ('terminate called', 'bad_alloc', 'Traceback')):
        problems.append('a crash instead of a refusal')
    print('%s: %s' % (name, 'ok' if not problems else 'FAILED (%s)' % '; '.join(problems)))
    if problems:
        FAILURES.append(name)
        print('  ' + '\n  '.join(out.strip().splitlines()[-6:]))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument('--build', required=True, help='the build folder')
    ap.add_argument('--mpirun', help='mpirun, for the two-rank cases')
    args = ap.parse_args()
    sol = os.path.join(args.build, 'solutions')
    train10 = os.path.join(sol, '10_sharding', 'train')
    train08 = os.path.join(sol, '08_mixed_precision', 'train')
    what_if = os.path.join(sol, '09_time_cost', 'what_if')
    bench = os.path.join(sol, '04_collectives', 'bench_allreduce')

    # The shared flag parsing: a two-value flag given one value says so, not "got '--...'".
    expect_refused('betas-one-value', [train10, '--betas', '0.9', '--train-samples', '256'],
                   ["--betas: takes 2 values", "got 1: '0.9' before --train-samples"])
    expect_refused('betas-one-value-last', [train10, '--betas', '0.9'],
                   ["--betas: takes 2 values", "got 1: '0.9'"])
    expect_refused('betas-equals', [train10, '--betas=0.9'], ["--betas: takes 2 values"])

    # Lessons 13-15's programs and lesson 15's plan: lesson 01's validators, one line each.
    train13 = os.path.join(sol, '13_tp_sp', 'train')
    train14 = os.path.join(sol, '14_context_parallel', 'train')
    train15 = os.path.join(sol, '15_3d_parallel', 'train')
    plan = os.path.join(sol, '15_3d_parallel', 'plan')
    for flag, value, must in [('--steps', '0', 'a positive integer'), ('--steps', '-1', 'a positive integer'),
                              ('--seed', '-1', '0 or a positive integer'),
                              ('--batch-size', '1e8', 'a positive integer'),
                              ('--micro', '-3', '0 or a positive integer'),
                              ('--dp', '0', 'a positive integer'), ('--pp', '-2', 'a positive integer')]:
        expect_refused('train15%s-%s' % (flag, value), [train15, flag, value],
                       ["%s: must be %s, got '%s'" % (flag, must, value)])
    expect_refused('train13--tp--1', [train13, '--tp', '-1'], ["--tp: must be 0 or a positive integer, got '-1'"])
    expect_refused('train14--cp--1', [train14, '--cp', '-1'], ["--cp: must be 0 or a positive integer, got '-1'"])
    hand = [plan, '--model', 'tiny', '--gpus', '8']
    for flag, value, must in [('--gpus-per-node', '0', 'a positive integer'), ('--intra-gbs', '0', 'a number > 0'),
                              ('--gpus', '-8', 'a positive integer'), ('--memory-gib', '-1', 'a number >= 0'),
                              ('--layers', '-2', 'a positive integer'), ('--embd', '-5', 'a positive integer'),
                              ('--layers', '0', 'a positive integer'), ('--seq', '0', 'a positive integer'),
                              ('--tflops', '0', 'a number > 0')]:
        expect_refused('plan%s-%s' % (flag, value), hand + [flag, value],
                       ["%s: must be %s, got '%s'" % (flag, must, value)], one_line=True)
    # What the flags' validators cannot see, the planner refuses before its first line.
    expect_refused('plan-seq-past-context', hand + ['--seq', '129'],
                   ["a sequence of 129 tokens is past the model's context of 128"], one_line=True)
    expect_refused('plan-heads-not-dividing', hand + ['--heads', '5'],
                   ["C must be a multiple of the heads"], one_line=True)

    # Lesson 09's what_if: every flag checked before anything is predicted.
    link = [what_if, '--workload', WORKLOAD, '--alpha-us', '50', '--beta-ns', '1']
    expect_refused('whatif-ranks-overflow', link + ['--ranks', '99999999999'],
                   ["--ranks: '99999999999' is not a rank count from 1 to"])
    expect_refused('whatif-ranks-empty', link + ['--ranks', ''], ["--ranks: '' names no rank count"])
    expect_refused('whatif-batch-0', link + ['--batch', '0'],
                   ["--batch: must be a positive integer, got '0'"])
    expect_refused('whatif-batch-negative', link + ['--batch', '-64'],
                   ["--batch: must be a positive integer, got '-64'"])
    expect_refused('whatif-global-batch-0', link + ['--global-batch', '0'],
                   ["--global-batch: must be a positive integer, got '0'"])
    expect_refused('whatif-both-batches', link + ['--global-batch', '128', '--batch', '64'],
                   ['--batch 64 and --global-batch 128 exclude each other'])
    expect_refused('whatif-alpha-negative',
                   [what_if, '--workload', WORKLOAD, '--alpha-us', '-10', '--beta-ns', '1'],
                   ["--alpha-us: must be a number >= 0, got '-10'"])
    expect_refused('whatif-beta-nan',
                   [what_if, '--workload', WORKLOAD, '--alpha-us', '10', '--beta-ns', 'nan'],
                   ["--beta-ns: must be a number >= 0, got 'nan'"])
    expect_refused('whatif-alpha-alone', [what_if, '--workload', WORKLOAD, '--alpha-us', '10'],
                   ['--alpha-us and --beta-ns go together'])
    # Strong scaling over rank counts without 1: E(N) is still against one rank's prediction.
    rc, out = run(link + ['--global-batch', '7', '--ranks', '2,4'])
    ok = rc == 0 and 'nan' not in out and 'strong scaling' in out
    print('whatif-global-batch-no-one-rank: %s' % ('ok' if ok else 'FAILED'))
    if not ok:
        FAILURES.append('whatif-global-batch-no-one-rank')
        print(out)

    # Lesson 04's bench_allreduce: its advertised maximum is refused when memory cannot hold
    # it, with the sizes, before anything is allocated; one rank alone is refused too.
    expect_refused('bench-64G-one-rank', [bench, '--min-size', '64G', '--max-size', '64G'],
                   ['error: the largest message, --min-size 64G', 'of host memory',
                    'give a smaller --max-size'])
    expect_refused('bench-one-rank', [bench, '--max-size', '4K'],
                   ['error: a world of 1 rank has nothing to communicate'])
    if args.mpirun:
        expect_refused('bench-64G-two-ranks',
                       [args.mpirun, '-np', '2', bench, '--min-size', '64G', '--max-size', '64G'],
                       ['error: the largest message, --min-size 64G', "2 rank(s)"], timeout=180)

    # Options that would change nothing where they are given: refused, not ignored.
    expect_refused('bucket-view-with-zero3',
                   [train10, '--gradient-as-bucket-view', '--zero', '3', '--data', 'synthetic'],
                   ['--gradient-as-bucket-view: DDP\'s option, for --zero 0 only; --zero 3'])
    expect_refused('init-scale-with-bf16', [train08, '--precision', 'bf16', '--init-scale', '3.4e38'],
                   ['--init-scale: loss scaling is off with --precision bf16',
                    'need no loss scaling'])
    expect_refused('growth-interval-with-fp32',
                   [train08, '--precision', 'fp32', '--growth-interval', '10'],
                   ['--growth-interval: loss scaling is off with --precision fp32'])
    expect_refused('init-scale-without-scaling',
                   [train08, '--no-loss-scaling', '--init-scale', '1024'],
                   ['--init-scale: --no-loss-scaling turns the scaler off'])

    if FAILURES:
        print('FAILED: %s' % ', '.join(FAILURES))
        return 1
    print('every wrong flag was refused with one clear line')
    return 0


if __name__ == '__main__':
    sys.exit(main())
