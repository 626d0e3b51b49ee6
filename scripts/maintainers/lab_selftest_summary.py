#!/usr/bin/env python3
"""lab_selftest_summary.py KERNEL LOG EXPECTED: judge one run of rdma-core's tests.

Part of scripts/maintainers/lab_selftest.sh (make lab-selftest). LOG holds the run's
output, with one "LAB_SELFTEST_RESULT [id, outcome, detail]" line per test;
EXPECTED lists the failures that are known rxe gaps, one per line:

    KERNELS  TEST-ID  OUTCOME  REASON...

KERNELS is a comma-separated list of LAB_KERNEL names, or *; OUTCOME is
failed or error, or racy: a test that fails or passes by timing, counted as
expected either way. Prints passed, failed and skipped (by reason) and exits 0
if every failure is expected for KERNEL, no expected failure passed, and no
test was skipped for a reason that is the lab's own; else 1.
"""
import collections
import json
import re
import sys

# Skip reasons that mean the lab, not rxe, is at fault.
LAB_FAULTS = ("doesn't have net interface",)


def expected_failures(path, kernel):
    expected = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith('#'):
                continue
            fields = line.split(None, 3)
            if len(fields) < 4 or fields[2] not in ('failed', 'error', 'racy'):
                sys.exit(f'{path}:{n}: want KERNELS TEST-ID failed|error|racy REASON')
            kernels, test, outcome, reason = fields
            if kernels == '*' or kernel in kernels.split(','):
                expected[test] = (outcome, reason)
    return expected


def main(kernel, log, expected_path):
    results = []
    ran = None
    uname = '?'
    with open(log, errors='replace') as f:
        for line in f:
            if line.startswith('LAB_SELFTEST_RESULT '):
                results.append(json.loads(line[len('LAB_SELFTEST_RESULT '):]))
            elif m := re.match(r'Ran (\d+) tests? in', line):
                ran = int(m.group(1))
            elif m := re.match(r'selftest: kernel ([^\s,]+)', line):
                uname = m.group(1)
    expected = expected_failures(expected_path, kernel)
    by = collections.defaultdict(list)
    for test, outcome, detail in results:
        by[outcome].append((test, detail))
    problems = []
    if ran is None:
        problems.append(f'the suite did not finish (no "Ran N tests" line in {log})')

    print(f'lab-selftest on {kernel} ({uname}): {len(results)} tests: '
          f'{len(by["passed"])} passed, '
          f'{len(by["failed"]) + len(by["error"])} failed or errors, '
          f'{len(by["skipped"])} skipped')
    skips = collections.Counter(detail for _, detail in by['skipped'])
    if skips:
        print('skipped, by reason:')
        for reason, count in sorted(skips.items(), key=lambda kv: (-kv[1], kv[0])):
            print(f'  {count:4}  {reason}')
            if any(fault in reason for fault in LAB_FAULTS):
                problems.append(f'{count} test(s) skipped for a reason that is the lab\'s: {reason}')
    failures = [(t, o, d) for o in ('failed', 'error') for t, d in by[o]]
    seen = set()
    if failures:
        print(f'failures (known rxe gaps of {kernel} are in {expected_path}):')
    for test, outcome, detail in sorted(failures):
        seen.add(test)
        if test in expected:
            print(f'  expected  {test}: {outcome}: {detail}\n            ({expected[test][1]})')
        else:
            print(f'  UNEXPECTED  {test}: {outcome}: {detail}')
            problems.append(f'{test}: {outcome}: {detail}')
    outcomes = {t: o for t, o, _ in results}
    for test, (outcome, reason) in sorted(expected.items()):
        if test not in seen and outcome != 'racy':
            now = outcomes.get(test, 'not run')
            problems.append(f'{test} is listed as a known {outcome} on {kernel} ({reason}), but it {now}'
                            if now == 'not run' else
                            f'{test} is listed as a known {outcome} on {kernel} ({reason}), but it {now}: '
                            f'remove it from {expected_path}')
    for outcome in ('expected failure', 'unexpected success'):
        for test, _ in by[outcome]:
            print(f'  {outcome}: {test}')
    unexpected = len(failures) - len(seen & set(expected))
    print(f'{len(by["passed"])} passed, {unexpected} failed, {len(by["skipped"])} skipped')
    if problems:
        print('lab-selftest: FAILED:')
        for p in problems:
            print(f'  {p}')
        return 1
    print(f'lab-selftest: as expected on {kernel}')
    return 0


if __name__ == '__main__':
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
