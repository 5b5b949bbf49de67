#!/usr/bin/env python3
"""Per-unit inclusive instructions by function: a callgrind run minus a base run.

    callgrind_delta.py [--self] RUN.out BASE.out N [TOP]

Prints, for the TOP (default 40) functions with the largest inclusive count
in RUN less the one in BASE (`-`: none), that difference over N: what one unit of the
extra work (a request) spends in each. Runtime plumbing and closures without
a name are left out. With --self, the functions' own (exclusive) counts.
"""
import re
import subprocess
import sys


def inclusive(path, own=False):
    flag = "--inclusive=no" if own else "--inclusive=yes"
    out = subprocess.run(["callgrind_annotate", flag, "--threshold=100", path],
                         capture_output=True, text=True, check=True).stdout
    totals = {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+(?:\S*:)?(.*?)\s+\[", line)
        if m:
            totals[m.group(2)] = totals.get(m.group(2), 0) + int(m.group(1).replace(",", ""))
    return totals


def main():
    args = sys.argv[1:]
    own = args[0] == "--self"
    if own:
        args = args[1:]
    run, n = inclusive(args[0], own), int(args[2])
    base = {} if args[1] == "-" else inclusive(args[1], own)
    top = int(args[3]) if len(args) > 3 else 40
    rows = sorted((((run[k] - base.get(k, 0)) / n, k) for k in run), reverse=True)
    plumbing = ("main", "lang_start", "short_backtrace", "0x0")
    shown = [(v, k) for v, k in rows if k != "{{closure}}" and not any(p in k for p in plumbing)]
    for v, k in shown[:top]:
        print(f"  {v:10.0f}  {k[:140]}")


if __name__ == "__main__":
    main()
