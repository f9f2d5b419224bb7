from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from memory.models import Event

DATASET = Path(__file__).parent / "data" / "memory_eval.json"


def test_it_reports_that_fused_search_beats_every_branch(db):
    out = StringIO()
    call_command("memory_eval", str(DATASET), "--k", "5", "--k", "10", "--json", stdout=out)
    report = json.loads(out.getvalue())
    assert report["conversations"] == 4 and report["questions"] == 71
    assert report["k"] == [5, 10]
    recall = report["recall"]
    assert set(recall) == {"fused", "vector", "lexical", "recency"}
    assert recall["fused"]["10"] > recall["recency"]["10"] + 0.3
    for k in ("5", "10"):  # the fusion never loses to its better branch
        assert recall["fused"][k] >= max(recall["vector"][k], recall["lexical"][k]), recall
    context = report["context"]
    assert set(context) == {"recall", "mean_items", "mean_tokens"}
    assert 0.5 < context["recall"] <= 1.0
    assert 0 < context["mean_items"] <= 12 and context["mean_tokens"] > 10
    # The throw-away users and their events are gone.
    assert not User.objects.exists() and not Event.objects.exists()


def test_it_prints_a_table_by_default(db, tmp_path):
    dataset = tmp_path / "tiny.json"
    dataset.write_text(
        json.dumps(
            {
                "conversations": [
                    {
                        "id": "c1",
                        "speaker_a": "Ann",
                        "speaker_b": "Bo",
                        "turns": [
                            {
                                "id": "D1:1",
                                "speaker": "Ann",
                                "text": "My cat Pixel loves tuna",
                                "timestamp": "2024-01-01T10:00:00",
                            },
                            {
                                "id": "D1:2",
                                "speaker": "Bo",
                                "text": "I am learning the cello",
                                "timestamp": "2024-01-01T10:01:00",
                            },
                        ],
                        "questions": [
                            {"question": "What is the name of Ann's cat?", "evidence": ["D1:1"]}
                        ],
                    }
                ]
            }
        )
    )
    out = StringIO()
    call_command("memory_eval", str(dataset), "--k", "1", stdout=out, stderr=StringIO())
    lines = out.getvalue().splitlines()
    assert lines[0] == "1 conversations, 1 questions"
    assert lines[1].split() == ["branch", "recall@1"]
    assert lines[3].split() == ["vector", "1.000"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
        ('{"conversations": []}', "at least one"),
        ('{"conversations": [{"id": "c1", "turns": []}]}', "has no 'questions'"),
        (
            '{"conversations": [{"id": "c1", "turns": [{"id": "D1:1"}], "questions": []}]}',
            "string id, speaker and text",
        ),
        (
            '{"conversations": [{"id": "c1", "turns": [], "questions": '
            '[{"question": "q", "evidence": ["D9:9"]}]}]}',
            "names no turn",
        ),
        ('{"conversations": ["c1"]}', "is not an object"),
        ('{"conversations": [{"id": 1, "turns": [], "questions": []}]}', "id must be a string"),
        ('{"conversations": [{"id": "c1", "turns": "abc", "questions": []}]}', "must be a list"),
        ('{"conversations": [{"id": "c1", "turns": ["x"], "questions": []}]}', "string id"),
        (
            '{"conversations": [{"id": "c1", "questions": [], "turns": [{"id": "D1:1", '
            '"speaker": "A", "text": "t", "timestamp": "last tuesday"}]}]}',
            "not ISO 8601",
        ),
        (
            '{"conversations": [{"id": "c1", "turns": [], "questions": '
            '[{"question": "q", "evidence": [["D1:1"]]}]}]}',
            "list of evidence turn ids",
        ),
        ('{"conversations": [{"id": "c1", "turns": [], "questions": ["q"]}]}', "evidence"),
        (
            '{"conversations": [{"id": "c1", "turns": [{"id": "D1:1", "speaker": "A", '
            '"text": "t"}], "questions": [{"question": "q", "evidence": ["D1:1"], '
            '"category": [4]}]}]}',
            "category must be a string or number",
        ),
    ],
)
def test_it_rejects_a_malformed_dataset(db, tmp_path, content, message):
    dataset = tmp_path / "bad.json"
    dataset.write_text(content)
    with pytest.raises(CommandError, match=message):
        call_command("memory_eval", str(dataset))


def test_it_rejects_a_missing_file(db, tmp_path):
    with pytest.raises(CommandError, match="cannot be read"):
        call_command("memory_eval", str(tmp_path / "nope.json"))


def test_it_measures_the_context_only_by_what_the_turn_really_sends(db, tmp_path, configure):
    """With recall and every branch but recency off, nothing of the past reaches the
    prompt: the context figure is measured, not inferred from search."""
    configure("memory", recall_limit=0, relevance_limit=0, similarity_limit=0, search_limit=0)
    document = json.loads(DATASET.read_text())
    small = tmp_path / "slice.json"
    small.write_text(json.dumps({"conversations": document["conversations"][:1]}))
    out = StringIO()
    call_command("memory_eval", str(small), "--json", stdout=out)
    report = json.loads(out.getvalue())
    assert report["context"] == {"recall": 0.0, "mean_items": 0.0, "mean_tokens": 0.0}
    assert report["recall"]["fused"]["10"] > 0.5  # search itself still works


def two_conversations(tmp_path) -> Path:
    """Two tiny conversations whose questions carry LoCoMo's category numbers and a
    category of the dataset's own."""

    def conversation(name: str, text: str, question: str, category) -> dict:
        return {
            "id": name,
            "turns": [
                {"id": "D1:1", "speaker": "Ann", "text": text},
                {"id": "D1:2", "speaker": "Bo", "text": "I am learning the cello"},
            ],
            "questions": [
                {"question": question, "evidence": ["D1:1"], "category": category},
                {"question": "What is Bo learning?", "evidence": ["D1:2"], "category": 4},
            ],
        }

    dataset = tmp_path / "folds.json"
    dataset.write_text(
        json.dumps(
            {
                "conversations": [
                    conversation("a", "My cat Pixel loves tuna", "What does Pixel eat?", 2),
                    conversation("b", "Our kayak is red", "What colour is the kayak?", "boats"),
                ]
            }
        )
    )
    return dataset


def test_it_reports_recall_per_category_and_on_a_fold(db, tmp_path):
    dataset = two_conversations(tmp_path)
    out = StringIO()
    call_command("memory_eval", str(dataset), "--k", "1", "--json", stdout=out)
    categories = json.loads(out.getvalue())["categories"]
    # LoCoMo's numbers by name; another category as the dataset spells it.
    assert {name: c["questions"] for name, c in categories.items()} == {
        "boats": 1,
        "single-hop": 2,
        "temporal": 1,
    }
    assert categories["temporal"] == {"questions": 1, "fused": {"1": 1.0}, "context": 1.0}

    out = StringIO()
    call_command(
        "memory_eval", str(dataset), "--k", "1", "--json", "--conversation", "b", stdout=out
    )
    report = json.loads(out.getvalue())
    assert report["conversations"] == 1 and report["questions"] == 2
    assert set(report["categories"]) == {"boats", "single-hop"}

    out = StringIO()
    call_command("memory_eval", str(dataset), "--k", "1", stdout=out, stderr=StringIO())
    table = out.getvalue().splitlines()
    header = table.index(next(line for line in table if line.startswith("category")))
    assert table[header].split() == ["category", "questions", "fused@1", "context"]
    assert table[header + 2].split() == ["single-hop", "2", "1.000", "1.000"]


def test_it_refuses_a_fold_naming_no_conversation(db, tmp_path):
    with pytest.raises(CommandError, match="no conversation c in the dataset"):
        call_command("memory_eval", str(two_conversations(tmp_path)), "--conversation", "c")
