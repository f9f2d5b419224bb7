"""The top costs of a profile, as markdown tables: a speedscope file (py-spy's,
or bench/profile_worker.py's, weighed in CPU seconds) or py-spy's collapsed
stacks (`--format raw`, one `frame;frame;... count` a line, at --rate).

Four tables of the top --top, in ms per --turns (or per --deltas, else in
total) and share of the profile's total:

- self time by function: where the CPU is spent (the innermost frame);
- self time by module: the same grouped by the innermost frame's package
  (`django/db`, `json`, ...; the project's own files by file);
- self time by project function: each sample charged to the innermost of the
  project's functions (files under --root) on its stack, with the library
  code it called (a query's ORM and SQLite to the function that made it);
  what to change to remove a cost;
- inclusive time by project function: the project's functions with everything
  they call, each counted once per sample.

    .venv/bin/python bench/profile_summary.py \
        docs/performance/turn-embedded-before.speedscope.json --turns 400
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parent.parent

Frame = tuple[str, str]  # function, file
Sample = tuple[tuple[Frame, ...], float]  # stack from the outermost frame, seconds
Costs = defaultdict[str, float]  # seconds by name

RAW_FRAME = re.compile(r"^(?P<name>.*) \((?P<file>[^():]*)(?::\d+)?\)$")
UNITS = {"seconds": 1.0, "milliseconds": 1e-3, "microseconds": 1e-6, "nanoseconds": 1e-9}


def load(path: Path, rate: float = 100) -> list[Sample]:
    text = path.read_text()
    if text.lstrip().startswith("{"):
        return speedscope(json.loads(text))
    return collapsed(text.splitlines(), rate)


def speedscope(document: dict) -> list[Sample]:
    frames = [(frame["name"], frame.get("file") or "") for frame in document["shared"]["frames"]]
    samples: list[Sample] = []
    for profile in document["profiles"]:
        if profile["type"] != "sampled":
            raise ValueError(f"a profile of type {profile['type']!r}: only sampled ones are read")
        unit = UNITS.get(profile.get("unit", "seconds"), 1.0)
        for stack, weight in zip(profile["samples"], profile["weights"], strict=True):
            samples.append((tuple(frames[index] for index in stack), weight * unit))
    return samples


def collapsed(lines: Iterable[str], rate: float) -> list[Sample]:
    samples: list[Sample] = []
    for line in lines:
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        frames = []
        for frame in stack.split(";"):
            match = RAW_FRAME.match(frame)
            frames.append((match["name"], match["file"]) if match else (frame, ""))
        samples.append((tuple(frames), int(count) / rate))
    return samples


def relative(file: str, root: Path) -> str:
    """The file as the repository or its package names it (`agent/runtime.py`,
    `django/db/models/query.py`, `json/encoder.py`)."""
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in file:
            return file.rsplit(marker, 1)[1]
    if file.startswith(str(root) + "/"):
        return file[len(str(root)) + 1 :]
    if match := re.search(r"/lib/python3\.\d+/(.*)$", file):
        return match[1]
    return file


def in_project(file: str, root: Path) -> bool:
    """A file of the project: under --root (py-spy's full paths), or one of its
    files named relative to it (shortened paths), and not a virtualenv's."""
    if "-packages/" in file:
        return False
    path = Path(file)
    if path.is_absolute():
        return path.is_relative_to(root)
    return bool(file) and (root / file).is_file()


def module(file: str, root: Path) -> str:
    name = relative(file, root)
    if in_project(file, root):
        return name
    packages = PurePosixPath(name).parts[:-1]  # two levels at most: django/db, json
    return "/".join(packages[:2]) if packages else name.removesuffix(".py")


def label(frame: Frame, root: Path) -> str:
    return f"{frame[0]} ({relative(frame[1], root)})" if frame[1] else frame[0]


def tables(samples: list[Sample], root: Path, top: int) -> dict[str, Costs]:
    by_function: Costs = defaultdict(float)
    by_module: Costs = defaultdict(float)
    charged: Costs = defaultdict(float)
    inclusive: Costs = defaultdict(float)
    for stack, seconds in samples:
        if not stack:
            continue
        by_function[label(stack[-1], root)] += seconds
        by_module[module(stack[-1][1], root)] += seconds
        ours = [label(frame, root) for frame in stack if in_project(frame[1], root)]
        charged[ours[-1] if ours else f"(none: {module(stack[-1][1], root)})"] += seconds
        for name in set(ours):
            inclusive[name] += seconds
    return {
        "self time by function": by_function,
        "self time by module": by_module,
        "self time by project function": charged,
        "inclusive time by project function": inclusive,
    }


def markdown(title: str, costs: Costs, total: float, per: int, unit: str, top: int) -> str:
    head = "ms" + (f" per {unit}" if per else "")
    lines = [f"| {title} | {head} | share |", "|---|---|---|"]
    for name, seconds in sorted(costs.items(), key=lambda item: -item[1])[:top]:
        ms = seconds * 1000 / (per or 1)
        shown = name.replace("|", "\\|")
        lines.append(f"| `{shown}` | {ms:.2f} | {seconds / total:.1%} |")
    return "\n".join(lines)


def summary(samples: list[Sample], *, root: Path, top: int, per: int, unit: str) -> str:
    total = sum(seconds for _, seconds in samples)
    if not total:
        return "no samples"
    head = f"{len(samples)} samples, {total:.2f} s"
    if per:
        head += f", {total * 1000 / per:.2f} ms per {unit} ({per} {unit}s)"
    parts = [head]
    for title, costs in tables(samples, root, top).items():
        parts.append(markdown(title, costs, total, per, unit, top))
    return "\n\n".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("profile", type=Path, nargs="+", help="summed when several")
    per = parser.add_mutually_exclusive_group()
    per.add_argument("--turns", type=int, default=0, help="ms per turn")
    per.add_argument("--deltas", type=int, default=0, help="ms per streamed delta")
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--rate", type=float, default=100, help="of a collapsed file, Hz")
    parser.add_argument("--root", type=Path, default=ROOT, help="the project's files")
    options = parser.parse_args()
    samples = [sample for path in options.profile for sample in load(path, options.rate)]
    unit = "turn" if options.turns else "delta"
    per_unit = options.turns or options.deltas
    root = options.root.resolve()
    print(summary(samples, root=root, top=options.top, per=per_unit, unit=unit))
    return 0


if __name__ == "__main__":
    sys.exit(main())
