"""The event vocabulary, named once on EventType and Event (memory/models.py)."""

from __future__ import annotations

from datetime import datetime

import pytest
from django.utils import timezone

from memory.models import Event, EventType, transcript


def test_its_groups_nest_as_the_memory_uses_them():
    assert set(EventType.TURNS) == {EventType.USER_MESSAGE, EventType.ASSISTANT_RESPONSE}
    assert set(EventType.TURNS) < set(EventType.RECALLABLE) < set(EventType.CONTENT)
    assert set(EventType.TURNS) < set(EventType.HISTORY) < set(EventType.CONTENT)
    # A tool's output is shown to the model and embedded, never recalled as memory;
    # a summary is recalled, and the model sees it as recall, not as history.
    assert EventType.TOOL_RESULT in set(EventType.HISTORY) - set(EventType.RECALLABLE)
    assert EventType.SUMMARY in set(EventType.RECALLABLE) - set(EventType.HISTORY)
    # Lifecycle, errors and recall notes have no content to embed or keep.
    for kind in (EventType.SESSION_START, EventType.ERROR, EventType.RECALL, EventType.TOOL_CALL):
        assert kind not in EventType.CONTENT


@pytest.mark.parametrize(
    "kind, role",
    [
        (EventType.USER_MESSAGE, "user"),
        (EventType.ASSISTANT_RESPONSE, "assistant"),
        (EventType.TOOL_CALL, "assistant"),
        (EventType.TOOL_RESULT, "tool"),
        (EventType.SYSTEM, "system"),
        (EventType.SUMMARY, None),
        (EventType.SESSION_START, None),
    ],
)
def test_an_event_knows_its_role_in_a_chat(kind, role):
    assert Event(event_type=kind).role == role


def test_a_role_maps_back_to_the_event_it_is_stored_as():
    for kind in (EventType.USER_MESSAGE, EventType.ASSISTANT_RESPONSE, EventType.TOOL_RESULT):
        assert EventType.of_role(Event(event_type=kind).role) == kind
    assert EventType.of_role("assistant") == EventType.ASSISTANT_RESPONSE  # not its tool call
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
