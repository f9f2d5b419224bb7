"""A user's chats: finding one, starting one, listing them, and checking a message.

Inputs reach a chat through sessions_app.runner, which runs them one at a time
per chat; what each does to the chat is in sessions_app.turns."""

from __future__ import annotations

import secrets
import uuid
from typing import Any

from django.db.models import Q
from django.utils import timezone

from core.ownership import Owner
from memory import fulltext
from memory.models import Event
from sessions_app.keys import SessionKey, SessionKeyError
from sessions_app.models import Agent, Session

WEB = "web"
MAX_MESSAGE_BYTES = 64 * 1024


class ChatError(Exception):
    """A chat that cannot be opened; `code` is the websocket close code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


NO_SUCH_CHAT = 4404


def find_chat(user: Owner, key: str, *, said: bool = False) -> Session:
    """The user's active session for `key`, else 4404, whether the key is
    malformed, unknown or someone else's: which of them is nobody else's business.
    `said`: with what a message arriving needs of its events (Session.objects.active)."""
    try:
        SessionKey.parse(key)
    except SessionKeyError as exc:
        raise ChatError(NO_SUCH_CHAT, str(exc)) from None
    session = Session.objects.active(user, key, said=said)
    if session is None:
        raise ChatError(NO_SUCH_CHAT, "There is no such chat.")
    return session


def start_chat(user: Owner, agent: Agent | None = None) -> Session:
    agent = agent or Agent.objects.default_for(user)
    # A random chat id keeps keys unguessable and unique across users.
    return Session.start(user, agent, WEB, secrets.token_hex(6))


def rename_chat(user: Owner, key: str, title: str) -> Session:
    """Name the chat `key` (every session of it: its archived transcripts are the
    same conversation); 4404 if it is not the user's."""
    session = find_chat(user, key)
    Session.objects.owned_by(user).filter(key=key).update(title=title, updated_at=timezone.now())
    session.title = title
    return session


def choose_model(user: Owner, key: str, model: str) -> Session:
    """The chat `key` answers with `model` (an agent.providers key, checked by the
    caller; "" for its agent's default) from its next turn on, and keeps it
    across resets: a rollover copies it to the next session."""
    session = find_chat(user, key)
    Session.objects.owned_by(user).filter(pk=session.pk).update(model=model)
    session.model = model
    return session


def latest_chat(user: Owner) -> Session | None:
    return (
        Session.objects.owned_by(user)
        .filter(channel=WEB, status=Session.Status.ACTIVE)
        .order_by("-last_activity_at")
        .first()
    )


def sidebar_chats(user: Owner, limit: int = 50, query: str = "") -> list[Session]:
    """The user's chats, newest first; with `query`, those whose title holds it or
    whose messages match its words (`saying`)."""
    chats = Session.objects.owned_by(user).filter(status=Session.Status.ACTIVE)
    query = " ".join(query.replace("\x00", "").split())[:MAX_QUERY]
    if query:
        chats = chats.filter(Q(title__icontains=query) | Q(key__in=saying(user, query)))
    return list(chats.select_related("agent").order_by("-last_activity_at")[:limit])


MAX_QUERY = 200
SEARCHED_MESSAGES = 200  # full-text matches read per agent: the best, enough for a list of 50


def saying(user: Owner, query: str) -> set[str]:
    """The keys of the user's chats with a message or answer matching `query`'s
    words: the memory's full-text index (memory.fulltext; whole words, stemmed)."""
    ids: list[int] = []
    for agent in Agent.objects.owned_by(user).values_list("name", flat=True):
        ids += [pk for pk, _ in fulltext.search(user.pk, agent, query, SEARCHED_MESSAGES)]
    if not ids:
        return set()
    events = Event.objects.owned_by(user).filter(pk__in=ids)
    sessions = {str(session_id) for session_id in events.values_list("session_id", flat=True)}
    keys = Session.objects.owned_by(user).filter(pk__in=[s for s in sessions if is_uuid(s)])
    return set(keys.values_list("key", flat=True))


def is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def check_message(text: Any) -> str:
    if not isinstance(text, str):
        raise ValueError("The message text must be a string.")
    # Neither can be stored (PostgreSQL refuses NUL; UTF-8 has no lone surrogates).
    if "\x00" in text:
        raise ValueError("The message cannot contain NUL characters.")
    try:
        size = len(text.encode())
    except UnicodeEncodeError:
        raise ValueError("The message is not valid Unicode (it has a lone surrogate).") from None
    if size > MAX_MESSAGE_BYTES:
        raise ValueError(f"The message is longer than {MAX_MESSAGE_BYTES // 1024} KB.")
    if not text.strip():
        raise ValueError("The message is empty.")
    return text.strip()
