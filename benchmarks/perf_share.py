#!/usr/bin/env python3
"""The share of a process's CPU spent in one part of the code, from a profile.

Reads `perf script --no-inline -F comm,tid,ip,sym` output of a
`perf record --call-graph dwarf` of the process (a blank line between
samples, the first line of each naming the thread, then one frame per line,
innermost first) and counts the samples whose stack holds at least one frame
whose symbol matches PATTERN (a Python regular expression, searched). A
sample counts once however many of its frames match, so nested matches are
not counted twice; the share is of all the process's samples (every thread).

    perf_share.py PATTERN [SCRIPT_FILE]     (default: standard input)

Prints one line: "MATCHED of TOTAL samples (PERCENT%), 95% upper bound
UPPER%", the bound a binomial one (Wilson's score interval), so a share of
a few samples still says how large it could be. Exits 2 on a bad pattern or
an empty profile.
"""
import math
import re
import sys


def samples(lines):
    """Yields each sample's frame symbols."""
    frames, in_sample = [], False
    for line in lines:
        if not line.strip():
            if in_sample:
                yield frames
            frames, in_sample = [], False
        elif not in_sample:
            in_sample = True  # the thread's line
        else:
            parts = line.split(None, 1)
            frames.append(parts[1].rstrip("\n") if len(parts) > 1 else "")
    if in_sample:
        yield frames


def wilson_upper(matched, total, z=1.96):
    p = matched / total
    centre = p + z * z / (2 * total)
    spread = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total))
    return (centre + spread) / (1 + z * z / total)


def main(argv):
    if len(argv) not in (2, 3) or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) > 1 and argv[1] in ("-h", "--help") else 2
    try:
        pattern = re.compile(argv[1])
    except re.error as e:
        print(f"perf_share.py: bad pattern '{argv[1]}': {e}", file=sys.stderr)
        return 2
    source = open(argv[2], errors="replace") if len(argv) == 3 else sys.stdin
    total = matched = 0
    for frames in samples(source):
        total += 1
        matched += any(pattern.search(f) for f in frames)
    if total == 0:
        print("perf_share.py: no samples in the profile", file=sys.stderr)
        return 2
    print(f"{matched} of {total} samples ({100 * matched / total:.2f}%), "
          f"95% upper bound {100 * wilson_upper(matched, total):.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
