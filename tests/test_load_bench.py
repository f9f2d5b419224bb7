"""Load: bench/load_chat.py end to end with tiny numbers, so that the benchmark
cannot rot (every turn answered, every event stored once, nothing left
running), and what it found: streamed frames dropped by a busy worker."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from channels.layers import channel_layers

from tests.support.processes import ROOT

TEAM = bool(os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL"))


def load_chat(tmp_path: Path, *args: str, marker: str = "") -> subprocess.CompletedProcess:
    # The marker is inherited by every process the bench starts, so that the
    # test can look for any of them afterwards; TMPDIR keeps its data dir and
    # the logs it keeps on failure in the test's own directory.
    env = {**os.environ, "NEOTASK_LOAD_TEST_MARKER": marker, "TMPDIR": str(tmp_path)}
    return subprocess.run(
        [sys.executable, "bench/load_chat.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def processes_marked(marker: str) -> list[int]:
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if f"NEOTASK_LOAD_TEST_MARKER={marker}".encode() in environ.read_bytes():
                found.append(int(environ.parent.name))
        except OSError:
            continue  # gone meanwhile, or not ours to read
    return found


@pytest.mark.slow
@pytest.mark.parametrize(
    "profile",
    [
        "embedded",
        pytest.param(
            "team",
            marks=pytest.mark.skipif(not TEAM, reason="needs DATABASE_URL and REDIS_URL"),
        ),
    ],
)
def test_it_answers_every_turn_and_stores_every_event_once(profile, tmp_path):
    done = load_chat(tmp_path, "--profile", profile, "--chats", "3", "--messages", "2", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    row = json.loads(done.stdout)
    assert row["turns"] == 6
    assert (row["errors"], row["frames_lost"], row["lost"], row["duplicated"]) == (0, 0, 0, 0)
    assert row["p50_ms"] is not None and row["p50_ms"] <= row["p95_ms"] <= row["max_ms"]


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")
def test_it_stops_everything_it_started_when_the_time_is_up(tmp_path):
    marker = uuid.uuid4().hex
    # Far more turns than fit in 8 s: the time runs out in the middle of the load.
    args = ["--profile", "embedded", "--chats", "3", "--messages", "500", "--timeout", "8"]
    done = load_chat(tmp_path, *args, marker=marker)
    assert done.returncode == 3, done.stderr[-3000:]
    assert "not done within --timeout 8 s" in done.stderr
    assert processes_marked(marker) == []


async def test_it_keeps_every_frame_of_a_burst_to_a_busy_worker():
    # With channels' default capacity of 100 a busy worker lost streamed deltas
    # at 100 chats: channels_redis queues the frames of all the chats a process
    # serves in one Redis list, and both layers drop frames beyond the capacity.
    layer = channel_layers.make_backend("default")
    group = f"burst-{uuid.uuid4().hex}"
    chats = [await layer.new_channel() for _ in range(10)]
    for chat in chats:
        await layer.group_add(group, chat)
    try:
        for number in range(150):  # sent faster than the worker reads them
            await layer.group_send(group, {"type": "chat.frame", "number": number})
        for chat in chats:
            received = [
                (await asyncio.wait_for(layer.receive(chat), timeout=5))["number"]
                for _ in range(150)
            ]
            assert received == list(range(150))
    finally:
        for chat in chats:
            await layer.group_discard(group, chat)
        if hasattr(layer, "close_pools"):
            await layer.close_pools()
