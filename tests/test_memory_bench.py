"""memory_bench: every stage reported, on generated text or a dataset's."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from memory.management.commands.memory_bench import STAGES
from memory.models import Event

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


def test_it_names_a_bad_dataset(db, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"conversations": "no"}')
    with pytest.raises(CommandError, match="at least one"):
        call_command("memory_bench", "--events", "10", "--texts", str(bad))
