"""memory_bench: every stage reported, on generated text or a dataset's."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import numpy as np
import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from memory.management.commands.memory_bench import STAGES, numpy_top, ratios, stored_vectors
from memory.models import Event
from memory.vectors import pack

DATASET = Path(__file__).parent / "data" / "memory_eval.json"


def test_it_times_every_stage_on_a_datasets_text(db):
    out = StringIO()
    call_command("memory_bench", "--events", "400", "--texts", str(DATASET), "--json", stdout=out)
    report = json.loads(out.getvalue())
    assert report["events"] == 400 and report["texts"] == str(DATASET)
    assert report.keys() >= set(STAGES)
    for stage in STAGES:
        assert 0 < report[stage]["p50_ms"] <= report[stage]["p95_ms"]
    assert not User.objects.exists() and not Event.objects.exists()  # cleaned up
    # get_context against a numpy scan of the same vectors, in the same run.
    reference = report["numpy_reference"]
    assert reference["vectors"] == 400  # every event's vector, no other
    assert 0 < reference["p50_ms"] <= reference["p95_ms"]
    for name in ("p50", "p95"):
        context, scan = report["get_context"][f"{name}_ms"], reference[f"{name}_ms"]
        rounding = 0.005  # the reported milliseconds are rounded to 2 decimals
        low, high = (
            (context - rounding) / (scan + rounding),
            (context + rounding) / (scan - rounding),
        )
        assert low <= report["get_context_to_numpy"][name] <= high
    context, scan = report["get_context"]["cpu_p50_ms"], reference["cpu_p50_ms"]
    assert context > 0 and scan > 0  # the process's CPU time, per call
    low, high = (context - rounding) / (scan + rounding), (context + rounding) / (scan - rounding)
    assert low <= report["get_context_to_numpy"]["cpu_p50"] <= high


def test_the_reference_finds_the_best_k_of_the_owners_vectors_only(db, django_user_model):
    owner = django_user_model.objects.create(username="owner")
    other = django_user_model.objects.create(username="other")
    rng = np.random.default_rng(3)
    mine = rng.standard_normal((120, 384)).astype(np.float32)
    for number, vector in enumerate(mine):
        Event.objects.create(
            owner=owner,
            session_id="s",
            event_type="user_message",
            data={},
            text=f"m{number}",
            embedding=pack(vector),
        )
    Event.objects.create(
        owner=other,
        session_id="s",
        event_type="user_message",
        data={},
        text="theirs",
        embedding=pack(mine[0] * 10),
    )
    Event.objects.create(
        owner=owner, session_id="s", event_type="user_message", data={}, text="no vector yet"
    )
    vectors = stored_vectors(owner)
    assert vectors.shape == (384, 120)
    query = rng.standard_normal(384).astype(np.float32)
    best = set(np.argsort(-(mine @ query))[:50])
    assert set(numpy_top(vectors, query)) == best
    assert sorted(numpy_top(vectors[:, :7], query)) == list(range(7))  # fewer than k


def test_ratios_are_of_the_percentiles():
    assert ratios([2.0] * 19 + [9.0], [1.0] * 19 + [3.0]) == {"p50": 2.0, "p95": 2.0}
    assert ratios([1.0] * 18 + [4.0, 4.0], [1.0] * 20) == {"p50": 1.0, "p95": 4.0}


def test_it_times_only_the_stages_asked_for(db):
    out = StringIO()
    call_command(
        "memory_bench",
        *("--events", "60", "--texts", str(DATASET), "--samples", "3", "--json"),
        *("--stages", "vector_branch", "lexical_branch"),
        stdout=out,
    )
    report = json.loads(out.getvalue())
    assert report["vector_branch"]["p50_ms"] > 0 and report["lexical_branch"]["p50_ms"] > 0
    assert not {"get_context", "numpy_reference", "search_with_embedding"} & report.keys()


def test_it_names_a_bad_dataset(db, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"conversations": "no"}')
    with pytest.raises(CommandError, match="at least one"):
        call_command("memory_bench", "--events", "10", "--texts", str(bad))
