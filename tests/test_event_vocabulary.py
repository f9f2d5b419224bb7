"""What each event type does where the code reads the event log: the model's
prompt, memory search, working memory, embedding, compaction and transcripts.

One session holds one event of every type, each saying the same rare word, so
that what a path leaves out is left out for its type, not for lack of text."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from agent.prompt import build_messages
from memory import recording
from memory.models import Event, EventType, transcript
from memory.search import search_memory
from memory.working import working_memory
from sessions_app.compaction import split
from sessions_app.models import Agent, Session
from sessions_app.transcripts import transcript_chunks
from tests.support.records import take_queued_tasks

WORD = "quokka"
CALL = {"id": "c1", "type": "function", "function": {"name": "terminal", "arguments": "{}"}}
# Written in the order a turn writes them (a session opens; a message, an answer
# calling a tool, the call, its result; notes), then what later jobs add.
EVERY_KIND: list[tuple[str, dict]] = [
    (EventType.SESSION_START, {}),
    (EventType.USER_MESSAGE, {}),
    (EventType.ASSISTANT_RESPONSE, {"tool_calls": [CALL]}),
    (EventType.TOOL_CALL, {"id": "c1", "name": "terminal", "arguments": "{}"}),
    (EventType.TOOL_RESULT, {"tool_call_id": "c1", "name": "terminal"}),
    (EventType.SYSTEM, {"kind": "stopped"}),
    (EventType.ERROR, {"kind": "llm"}),
    (EventType.RECALL, {"items": []}),
    (EventType.SUMMARY, {}),
    (EventType.COMPACTION, {"carried_over": []}),
    (EventType.SESSION_END, {}),
]
assert {kind for kind, _ in EVERY_KIND} == set(EventType.values)  # a new type is added here
SAID = [EventType.USER_MESSAGE, EventType.ASSISTANT_RESPONSE, EventType.TOOL_RESULT]
SUMMARIES = [EventType.SUMMARY, EventType.COMPACTION]


def said_by(kind: str) -> str:
    return f"{WORD} {kind}"


def chat_with_every_kind(owner: User) -> Session:
    session = Session.start(owner, Agent.objects.default_for(owner), "web", "vocabulary")
    for kind, data in EVERY_KIND:
        recording.record(owner, str(session.pk), kind, {"content": said_by(kind), **data})
    return session


@pytest.fixture
def every_kind_session(alice: User) -> Session:
    return chat_with_every_kind(alice)


def kinds(events: list[Event]) -> list[str]:
    return [event.event_type for event in events]


def test_it_shows_the_model_the_exchange_and_a_compaction_as_its_summary(alice, every_kind_session):
    instructions, system, *history = build_messages(alice, str(every_kind_session.pk), "")
    assert instructions["role"] == system["role"] == "system"
    assert history == [
        {"role": "user", "content": said_by(EventType.USER_MESSAGE)},
        {
            "role": "assistant",
            "content": said_by(EventType.ASSISTANT_RESPONSE),
            "tool_calls": [CALL],
        },
        {"role": "tool", "tool_call_id": "c1", "content": said_by(EventType.TOOL_RESULT)},
    ]
    prompt = system["content"]
    assert f"Summary of this conversation so far:\n{said_by(EventType.COMPACTION)}" in prompt
    # Nothing else of the session reaches the model: lifecycle, notes and errors are
    # for people, a tool call is its answer's, and a consolidation summary of the
    # session's own events is not repeated beside them.
    shown = [kind for kind in EventType.values if said_by(kind) in json.dumps([system, *history])]
    assert sorted(shown) == sorted([*SAID, EventType.COMPACTION])


@pytest.mark.parametrize("branch", ["lexical", "recency"])
def test_it_searches_what_was_said_and_summarised_but_no_tool_output(
    alice, every_kind_session, branch
):
    hits = search_memory(alice, WORD, k=20, branch=branch)
    assert sorted(kinds([hit.event for hit in hits])) == sorted(
        [EventType.USER_MESSAGE, EventType.ASSISTANT_RESPONSE, *SUMMARIES]
    )


def test_it_keeps_what_has_content_in_working_memory(alice, every_kind_session):
    recent = working_memory.recent(alice, str(every_kind_session.pk), limit=50)
    assert kinds(recent) == [*SAID, *SUMMARIES]


def test_it_embeds_what_has_content(alice, django_capture_on_commit_callbacks):
    take_queued_tasks()
    with django_capture_on_commit_callbacks(execute=True):
        chat_with_every_kind(alice)
    queued = [task for task in take_queued_tasks() if task["func"] == "memory.tasks.embed_events"]
    ids = [event_id for task in queued for event_id in task["args"][0]]
    assert kinds(list(Event.objects.filter(pk__in=ids))) == [*SAID, *SUMMARIES]


def test_compaction_summarises_only_what_has_content(every_kind_session):
    older, recent = split(every_kind_session, keep=1)
    assert kinds(older + recent) == [*SAID, *SUMMARIES]


def test_a_transcript_gives_each_event_its_role_in_a_chat(every_kind_session):
    lines = [
        json.loads(line) for line in "".join(transcript_chunks(every_kind_session)).splitlines()
    ]
    assert [(line["type"], line.get("role")) for line in lines] == [
        (EventType.SESSION_START, None),
        (EventType.USER_MESSAGE, "user"),
        (EventType.ASSISTANT_RESPONSE, "assistant"),
        (EventType.TOOL_CALL, "assistant"),
        (EventType.TOOL_RESULT, "tool"),
        (EventType.SYSTEM, "system"),
        (EventType.ERROR, None),
        (EventType.RECALL, None),
        (EventType.SUMMARY, None),
        (EventType.COMPACTION, None),
        (EventType.SESSION_END, None),
    ]
    # Read back (an import), a role is stored as the event that says something in it.
    assert [EventType.of_role(line["role"]) for line in lines if "role" in line] == [
        EventType.USER_MESSAGE,
        EventType.ASSISTANT_RESPONSE,
        EventType.ASSISTANT_RESPONSE,  # a tool call's line is the answer that made it
        EventType.TOOL_RESULT,
        EventType.SYSTEM,
    ]
    assert EventType.of_role("narrator") is None


def test_a_transcript_names_each_speaker_and_keeps_the_newest_part():
    at = timezone.make_aware(datetime(2026, 5, 1, 9, 30))
    events = [
        Event(event_type=kind, text=text, created_at=at)
        for kind, text in [
            (EventType.COMPACTION, "Ada planned a trip."),
            (EventType.USER_MESSAGE, "I fly on Friday."),
            (EventType.ASSISTANT_RESPONSE, ""),  # only tool calls: no line
            (EventType.TOOL_RESULT, "saved"),
        ]
    ]
    assert transcript(events, 10_000).splitlines() == [
        "Earlier summary (2026-05-01 09:30): Ada planned a trip.",
        "User (2026-05-01 09:30): I fly on Friday.",
        "Tool (2026-05-01 09:30): saved",
    ]
    assert transcript(events, 12) == "09:30): saved"[-12:]
