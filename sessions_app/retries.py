"""Retry: the latest turn of a chat, failed or stopped, runs again from the same user message.

The old answer stays in the log as it was; the retry stores the user's message
again, marked `retry_of` the message it repeats, and the new answer follows it.
The model's history leaves out what the retried turn produced
(agent.prompt.history_messages), so it answers as if the turn had not failed.
"""

from __future__ import annotations

from typing import Any

from memory.models import Event, EventType
from sessions_app import chat

NO_SUCH = "There is no such answer to retry in this chat."
NOT_FAILED = "Only an answer that failed or was stopped can be retried."
NOT_LATEST = "Only the chat's latest answer can be retried."


class RetryError(Exception):
    """A retry refused; the message says why."""


def is_retryable(event: Event) -> bool:
    """What ends a failed or stopped turn: its error, its stop, or its cut-off answer."""
    data = event.data or {}
    if event.event_type == EventType.ERROR:
        return True
    if event.event_type == EventType.SYSTEM:
        return data.get("kind") == "stopped"
    return event.event_type == EventType.ASSISTANT_RESPONSE and bool(data.get("interrupted"))


def find_retry(owner: Any, key: str, event_id: Any) -> Event:
    """The user message whose turn ended with event `event_id`, to run again;
    RetryError unless that turn is the chat's latest and failed or was stopped."""
    try:
        session = chat.find_chat(owner, key)
    except chat.ChatError as exc:
        raise RetryError(str(exc)) from None
    events = Event.objects.owned_by(owner).filter(session_id=str(session.pk))
    # type(), not isinstance: JSON's true is a bool, which Python counts as the int 1.
    event = events.filter(pk=event_id).first() if type(event_id) is int else None
    if event is None:
        raise RetryError(NO_SUCH)
    if not is_retryable(event):
        raise RetryError(NOT_FAILED)
    messages = events.filter(event_type=EventType.USER_MESSAGE)
    if messages.filter(pk__gt=event.pk).exists():
        raise RetryError(NOT_LATEST)
    message = messages.filter(pk__lt=event.pk).order_by("-pk").first()
    if message is None:
        raise RetryError(NO_SUCH)
    return message
