"""Summarize a py-spy `--format raw` (collapsed stacks) file: top functions by own and by inclusive samples.

py-spy record --pid PID --duration 60 --format raw -o stacks.txt [--threads] [--idle]
python -m bench.pyspy_summary stacks.txt [--top 25] [--match inference,webapp]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path


def summarize(path: Path, top: int, match: list[str]) -> str:
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    threads: Counter[str] = Counter()  # with `py-spy record --threads`, a frame names each thread
    total = 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        threads[next((f for f in frames[:2] if f.startswith("thread")), "(threads not recorded)")] += n
        own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    if not total:
        return "no samples"
    lines = [f"{total} samples", "", "by thread:"]
    lines += [f"  {100 * n / total:5.1f}%  {name}" for name, n in threads.most_common(8)]
    lines += ["", "own time:"]
    lines += [f"  {100 * n / total:5.1f}%  {frame[:140]}" for frame, n in own.most_common(top)]
    lines += ["", f"inclusive time (frames matching {', '.join(match) or 'anything'}):"]
    shown = 0
    for frame, n in inclusive.most_common():
        if match and not any(m in frame for m in match):
            continue
        lines.append(f"  {100 * n / total:5.1f}%  {frame[:140]}")
        shown += 1
        if shown >= top:
            break
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path", type=Path)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--match", default="inference,webapp,bench", help="comma-separated substrings")
    args = p.parse_args(argv)
    print(summarize(args.path, args.top, [m for m in args.match.split(",") if m]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
