"""The profiler's arithmetic (bench/profile_worker.py, bench/profile_summary.py):
py-spy's samples weighed by the CPU time of their thread, and the top costs per
turn that the performance docs quote, on a made-up profile whose answer is known."""

from __future__ import annotations

import json
import subprocess
import sys

from bench.profile_summary import collapsed, speedscope, summary, tables
from bench.profile_worker import weigh
from tests.support.processes import ROOT

FRAMES = [
    {"name": "Turn.run", "file": "agent/runtime.py", "line": 1},
    {"name": "QuerySet.get", "file": "django/db/models/query.py", "line": 2},
    {"name": "JSONEncoder.encode", "file": "json/encoder.py", "line": 3},
]


def profile(samples: list[list[int]], weights: list[float]) -> dict:
    return {
        "shared": {"frames": FRAMES},
        "profiles": [
            {
                "type": "sampled",
                "name": "Thread 7",
                "unit": "seconds",
                "samples": samples,
                "weights": weights,
            }
        ],
    }


# 60 ms over 2 turns: 30 of them in the query, 10 in the turn's own code, 10 in json.
MADE_UP = profile([[0, 1]] * 3 + [[0, 2]] + [[0]] * 2, [0.01] * 6)


def test_it_counts_self_and_inclusive_time_per_turn():
    costs = tables(speedscope(MADE_UP), ROOT, top=10)
    ms = {
        title: {name: round(s * 1000 / 2, 3) for name, s in c.items()} for title, c in costs.items()
    }
    assert ms["self time by function"] == {
        "QuerySet.get (django/db/models/query.py)": 15.0,
        "Turn.run (agent/runtime.py)": 10.0,
        "JSONEncoder.encode (json/encoder.py)": 5.0,
    }
    assert ms["self time by module"] == {"django/db": 15.0, "agent/runtime.py": 10.0, "json": 5.0}
    # The project's function that made the library calls, charged with them.
    assert ms["self time by project function"] == {"Turn.run (agent/runtime.py)": 30.0}
    # Only the project's functions, each with all it calls.
    assert ms["inclusive time by project function"] == {"Turn.run (agent/runtime.py)": 30.0}


def test_a_library_call_is_charged_to_the_innermost_project_function_that_made_it():
    record = {"name": "record", "file": "memory/recording.py", "line": 4}
    made_up = profile([[0, 3, 1], [0, 1], [2]], [0.02, 0.01, 0.01])
    made_up["shared"]["frames"] = [*FRAMES, record]
    charged = tables(speedscope(made_up), ROOT, top=10)["self time by project function"]
    assert {name: round(seconds, 3) for name, seconds in charged.items()} == {
        "record (memory/recording.py)": 0.02,  # its query, not Turn.run's
        "Turn.run (agent/runtime.py)": 0.01,
        "(none: json)": 0.01,  # no project function on the stack
    }


def test_its_tables_say_ms_per_turn_and_share_biggest_first():
    text = summary(speedscope(MADE_UP), root=ROOT, top=2, per=2, unit="turn")
    assert text.startswith("6 samples, 0.06 s, 30.00 ms per turn (2 turns)")
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert rows[:2] == [
        "| `QuerySet.get (django/db/models/query.py)` | 15.00 | 50.0% |",
        "| `Turn.run (agent/runtime.py)` | 10.00 | 33.3% |",
    ]  # top 2 of 3


def test_it_reads_py_spys_collapsed_stacks_at_their_rate():
    lines = [
        "Turn.run (agent/runtime.py:1);QuerySet.get (django/db/models/query.py:2) 3",
        "Turn.run (agent/runtime.py:1) 1",
    ]
    assert collapsed(lines, rate=100) == [
        ((("Turn.run", "agent/runtime.py"), ("QuerySet.get", "django/db/models/query.py")), 0.03),
        ((("Turn.run", "agent/runtime.py"),), 0.01),
    ]


def test_samples_are_weighed_by_their_threads_cpu_time_and_waits_dropped():
    # py-spy saw 4 samples of thread 7 running, one of them waiting in select
    # (woken, waiting for a core); the thread used 0.6 s of CPU meanwhile.
    select = {"name": "EpollSelector.select", "file": "/usr/lib/python3.11/selectors.py"}
    raw = profile([[0, 1], [0, 3], [0, 2], [0]], [0.01] * 4)
    raw["shared"]["frames"] = [*FRAMES, select]
    weighed = weigh(raw, {7: 0.6})
    thread = weighed["profiles"][0]
    assert thread["samples"] == [[0, 1], [0, 2], [0]]
    assert [round(w, 6) for w in thread["weights"]] == [0.2, 0.2, 0.2]
    assert weighed["shared"]["frames"][3]["file"] == "selectors.py"  # no machine paths
    assert "0.03 s of samples weighed to 0.60 s of CPU" in weighed["name"]


def test_a_process_is_named_without_the_machines_paths():
    root = {"name": 'process 7:"/srv/venv/bin/python manage.py qcluster"', "file": ""}
    raw = profile([[3, 0]], [0.01])
    raw["shared"]["frames"] = [*FRAMES, root]
    frames = weigh(raw, {7: 0.1})["shared"]["frames"]
    assert frames[3]["name"] == 'process 7:"python manage.py qcluster"'


def test_the_command_prints_the_tables(tmp_path):
    path = tmp_path / "made-up.speedscope.json"
    path.write_text(json.dumps(MADE_UP))
    done = subprocess.run(
        [sys.executable, "bench/profile_summary.py", str(path), "--turns", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "| `django/db` | 15.00 | 50.0% |" in done.stdout
