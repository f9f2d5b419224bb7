"""Consolidation's material: a chat of yesterday, and the fast model's answer
(a summary and facts, as the consolidation prompt asks for them)."""

from __future__ import annotations

import json
from datetime import timedelta

from django.utils import timezone

from memory import recording
from memory.models import Event
from tests.support.scripted_llm import Reply

YESTERDAY = timezone.now() - timedelta(days=1)


def answer(summary: str, *facts: tuple[str, str, str]) -> Reply:
    body = {
        "summary": summary,
        "facts": [{"category": c, "key": k, "value": v} for c, k, v in facts],
    }
    return Reply(text="Here you go:\n" + json.dumps(body))


def chat_yesterday(owner, session="s1", texts=("I moved to Porto last week", "Nice! How is it?")):
    events = []
    for number, text in enumerate(texts):
        kind = "user_message" if number % 2 == 0 else "assistant_response"
        event = recording.record(owner, session, kind, {"content": text})
        Event.objects.filter(pk=event.pk).update(created_at=YESTERDAY + timedelta(minutes=number))
        events.append(event)
    return events
