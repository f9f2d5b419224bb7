"""Where a get_context call's time goes: py-spy records `manage.py memory_bench
--stages get_context` (get_context in turns with the numpy reference) and this
keeps the samples taken inside get_context, writes them as a speedscope profile
and prints the top costs per call.

    .venv/bin/python bench/get_context_profile.py --out docs/performance/x.speedscope.json \\
        [--events 100000] [--calls 1000] [--rate 250]

Two tables, in milliseconds per call and share of the call. The caller's thread,
waits included (py-spy --idle), so that its samples add up to the call's wall
time: each sample is counted at its innermost frame of Neotask's own code (a
Django query is counted at the line of memory/ that asked it, numpy at the line
that called it). And the process's product thread (memory/vector_query.py's
matrix-vector products), which works meanwhile: its busy samples only. py-spy
samples without pausing the process (--nonblocking), which would slow it down.
With DATABASE_URL set, memory_bench runs on that database (migrated first).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CALLER = ("get_context", "memory/retrieval.py")
PRODUCT = ("VectorQuery.compute", "memory/vector_query.py")
OURS = tuple(f"{ROOT}/{package}/" for package in ("memory", "core", "neotask_site", "agent"))


def record(raw: Path, events: int, calls: int, rate: int) -> None:
    python = Path(sys.executable)
    with tempfile.TemporaryDirectory(prefix="neotask-profile-") as data_dir:
        env = {**os.environ, "NEOTASK_DATA_DIR": data_dir}
        manage = [str(python), str(ROOT / "manage.py")]
        subprocess.run([*manage, "migrate", "-v0"], env=env, check=True, cwd=ROOT)
        spy = [str(python.with_name("py-spy")), "record", "--idle", "--nonblocking"]
        spy += ["-r", str(rate)]
        bench = ["memory_bench", "--events", str(events), "--json"]
        bench += ["--stages", "get_context", "--samples", str(calls)]
        subprocess.run(
            [*spy, "-f", "speedscope", "-o", str(raw), "--", *manage, *bench],
            env=env,
            check=True,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
        )


def within(profile: dict[str, Any], frames: list[dict[str, Any]], function: tuple[str, str]):
    """The samples of `profile` whose stack passes through `function` (name, file)."""
    name, file = function
    marks = {
        number
        for number, frame in enumerate(frames)
        if frame["name"] == name and frame["file"].endswith(file)
    }
    return [stack for stack in profile["samples"] if marks.intersection(stack)]


def site(stack: list[int], frames: list[dict[str, Any]]) -> str:
    """The innermost frame of Neotask's own code: where the time was asked for."""
    for number in reversed(stack):
        frame = frames[number]
        if frame["file"].startswith(OURS):
            return f"{frame['name']} ({Path(frame['file']).relative_to(ROOT)}:{frame['line']})"
    return frames[stack[-1]]["name"]


def costs(stacks: list[list[int]], frames: list[dict[str, Any]], per_call: float, total: float):
    counted = collections.Counter(site(stack, frames) for stack in stacks)
    return [
        (where, count * per_call, count * per_call / total if total else 0.0)
        for where, count in counted.most_common()
    ]


def table(title: str, rows: list[tuple[str, float, float]], top: int) -> str:
    lines = [f"| {title} | ms per call | share |", "|---|---|---|"]
    lines += [f"| `{where}` | {ms:.2f} | {share:.0%} |" for where, ms, share in rows[:top]]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the speedscope file to write")
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=1000, help="get_context calls profiled")
    parser.add_argument("--rate", type=int, default=250, help="samples per second")
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--raw", type=Path, help="an earlier recording to read instead")
    args = parser.parse_args()

    raw = args.raw
    if raw is None:
        raw = args.out.with_suffix(".raw.json")
        record(raw, args.events, args.calls, args.rate)
    recorded = json.loads(raw.read_text())
    frames = recorded["shared"]["frames"]
    caller = product = None
    for profile in recorded["profiles"]:
        if within(profile, frames, CALLER):
            caller = profile
        elif within(profile, frames, PRODUCT):
            product = profile
    if caller is None:
        raise SystemExit(f"{raw}: no sample inside get_context")
    calling = within(caller, frames, CALLER)
    computing = within(product, frames, PRODUCT) if product is not None else []

    interval = 1000 / args.rate  # ms per sample
    per_call = interval / args.calls
    wall = len(calling) * per_call
    print(f"get_context: {wall:.2f} ms per call over {args.calls} calls ({len(calling)} samples)")
    print(table("the caller's thread", costs(calling, frames, per_call, wall), args.top))
    print()
    print(f"product thread, meanwhile: {len(computing) * per_call:.2f} ms per call")
    print(table("the product thread", costs(computing, frames, per_call, wall), args.top))

    # Only what was summarised, and only the frames it uses: a small file.
    used = sorted({number for stack in calling + computing for number in stack})
    renumber = {old: new for new, old in enumerate(used)}
    kept = []
    for profile, stacks in ((caller, calling), (product, computing)):
        if profile is None or not stacks:
            continue
        kept.append(
            {
                **profile,
                "samples": [[renumber[number] for number in stack] for stack in stacks],
                "weights": [interval / 1000] * len(stacks),
                "endValue": len(stacks) * interval / 1000,
                "startValue": 0,
            }
        )
    recorded["shared"]["frames"] = [frames[number] for number in used]
    recorded["profiles"] = kept
    recorded["name"] = f"get_context, {args.calls} calls at {args.events} events"
    args.out.write_text(json.dumps(recorded, separators=(",", ":")))
    if args.raw is None:
        raw.unlink()


if __name__ == "__main__":
    main()
