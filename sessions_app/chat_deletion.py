"""Deleting chats, messages and turns on demand, for the chat page, the API and
the admin: what a chat or a turn is lives here; the deleting itself is
memory.forgetting's (events, their vectors everywhere, what was derived).

What else of a chat holds its text goes with it (`drop_copies`, on
memory.forgetting's `forgotten` signal): a chat named by a deleted first message
is named again, by the first message left, or left untitled (the sidebar, the
API, exports, backups and transcripts read the title from the row); a crashed
turn's saved partial answer goes with its deleted session (`free_claims`).

A session's token counters are what it spent, and stay; the next prompt's size
is measured afresh on every turn, so no count of a deleted message remains.
"""

from __future__ import annotations

import uuid

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from core.history import Actor
from core.ownership import Owner
from memory.forgetting import Busy, Forgotten, NothingToForget, forget_events, forget_sessions
from memory.models import Event, EventType
from sessions_app.models import ChatClaim, ChatInput, Session


class ChatBusy(Busy):
    """The chat is answering: what the turn writes next would outlive the deletion."""


def check_chats_idle(owner: Owner, events: list[Event]) -> None:
    """memory.forgetting's busy check: ChatBusy if one of the events' chats is answering."""
    sessions = {uuid for event in events if (uuid := session_uuid(event.session_id))}
    keys = Session.objects.owned_by(owner).filter(pk__in=sessions).values_list("key", flat=True)
    for key in set(keys):
        check_idle(owner, key)


def drop_copies(sender: object, owner: Owner, events: list[Event], **kwargs: object) -> None:
    """`forgotten`'s receiver: retitle the chats whose first message was deleted."""
    firsts = [event for event in events if event.event_type == EventType.USER_MESSAGE]
    if firsts:
        retitle(owner, firsts)


def retitle(owner: Owner, deleted: list[Event]) -> None:
    """A chat is named by its first message (Session.note_message): if that was
    deleted, by the first message left in the chat (its sessions, oldest first),
    or no title (as a new chat has) if none is left. A title the user chose stays."""
    sessions = Session.objects.owned_by(owner)
    named = {
        (Session.title_from(message_text(event)), uuid)
        for event in deleted
        if (uuid := session_uuid(event.session_id)) is not None
    }
    for title, session_id in named:
        chat = sessions.filter(pk=session_id, title=title).values_list("key", flat=True).first()
        if chat is None:
            continue
        chat_sessions = [str(pk) for pk in sessions.filter(key=chat).values_list("pk", flat=True)]
        first = (
            Event.objects.owned_by(owner)
            .filter(session_id__in=chat_sessions, event_type=EventType.USER_MESSAGE)
            .order_by("pk")
            .first()
        )
        new = Session.title_from(message_text(first)) if first is not None else ""
        sessions.filter(key=chat, title=title).update(title=new, updated_at=timezone.now())


def message_text(event: Event) -> str:
    """What the user wrote (from `data`: a deleted event's other fields are not loaded)."""
    content = event.data.get("content") if isinstance(event.data, dict) else None
    return content if isinstance(content, str) else ""


def free_claims(owner: Owner, session_id: str) -> None:
    """A deleted session's chat claim, if a crashed turn left it (expired, its
    partial answer saved for the next holder to store): let go, the text cleared."""
    ChatClaim.objects.owned_by(owner).filter(session_id=session_id).filter(
        Q(token="") | Q(lease_until__lt=timezone.now())
    ).update(token="", lease_until=None, session_id="", partial="")


def check_idle(owner: Owner, key: str) -> None:
    if ChatClaim.objects.is_held(owner.pk, key):
        raise ChatBusy(
            "The agent is answering in this chat: wait for the answer or stop it (/stop), "
            "then delete. Nothing was deleted."
        )


def delete_chat(owner: Owner, key: str) -> Forgotten:
    """Delete every session of the chat `key` (resets and compactions made
    several) with all their events, and its queued messages."""
    with transaction.atomic():
        sessions = Session.objects.owned_by(owner).filter(key=key)
        ids = [str(pk) for pk in sessions.values_list("pk", flat=True)]
        if not ids:
            raise NothingToForget("No such chat: it may have been deleted already.")
        check_idle(owner, key)
        report = forget_sessions(owner, ids, Actor.user(owner))
        sessions.delete()  # (sessions_app.signals then finds no event left)
        ChatInput.objects.owned_by(owner).filter(key=key).delete()
    return report


def owned_event(owner: Owner, event_id: int) -> Event:
    """The owner's event, if its chat is not answering (ChatBusy)."""
    event = Event.objects.owned_by(owner).filter(pk=event_id).first()
    if event is None:
        raise NothingToForget("No such message: it may have been deleted already.")
    key = Session.objects.owned_by(owner).filter(pk=session_uuid(event.session_id))
    for chat_key in key.values_list("key", flat=True):
        check_idle(owner, chat_key)
    return event


def session_uuid(session_id: str) -> uuid.UUID | None:
    """The session an event names (imported events may name none of Neotask's)."""
    try:
        return uuid.UUID(session_id)
    except ValueError:
        return None


def delete_message(owner: Owner, event_id: int) -> Forgotten:
    """Delete one event of the owner's; the rest of its session stays."""
    return forget_events(owner, [owned_event(owner, event_id).pk], Actor.user(owner))


def turn_of(event: Event) -> list[int]:
    """The ids of the turn `event` is part of: the user's message and everything
    the agent did in reply (tool calls, results, its answer), up to the next
    message of the user's. Events before the session's first message (its opening
    recall, a compaction summary) are a turn of their own: only `event`."""
    session = Event.objects.filter(owner_id=event.owner_id, session_id=event.session_id)
    start = (
        session.filter(event_type=EventType.USER_MESSAGE, pk__lte=event.pk)
        .order_by("-pk")
        .values_list("pk", flat=True)
        .first()
    )
    if start is None:
        return [event.pk]
    end = (
        session.filter(event_type=EventType.USER_MESSAGE, pk__gt=start)
        .order_by("pk")
        .values_list("pk", flat=True)
        .first()
    )
    turn = session.filter(pk__gte=start)
    if end is not None:
        turn = turn.filter(pk__lt=end)
    # The session's auto-recall, stored during its first turn, quotes other chats,
    # not this turn: it stays.
    return list(turn.exclude(event_type=EventType.RECALL).values_list("pk", flat=True))


def delete_turn(owner: Owner, event_id: int) -> Forgotten:
    """Delete the turn of one of the owner's events (`turn_of`)."""
    with transaction.atomic():
        return forget_events(owner, turn_of(owned_event(owner, event_id)), Actor.user(owner))
