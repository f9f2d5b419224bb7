"""The chat: finding a user's chats, checking a message, and one turn with its accounting.

Inputs reach a turn through sessions_app.inputs, which runs one at a time per chat;
its slash commands are in sessions_app.commands."""

from __future__ import annotations

import secrets
from typing import Any

import numpy as np
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.utils import timezone

from agent.frames import Error, SessionChanged
from agent.llm import Usage, configured_endpoint
from agent.prompt import build_messages, estimate_prompt_tokens, prompt_tokens
from agent.runtime import Emit, TurnRequest, TurnResult, embed_query, run_turn
from memory.models import Event, EventType
from memory.retrieval import get_context
from sessions_app.compaction import CompactionError, compact, should_compact
from sessions_app.keys import SessionKey, SessionKeyError
from sessions_app.lifecycle import ensure_fresh
from sessions_app.models import Agent, Session

WEB = "web"
MAX_MESSAGE_BYTES = 64 * 1024


class ChatError(Exception):
    """A chat that cannot be opened; `code` is the websocket close code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


NO_SUCH_CHAT = 4404


def find_chat(user: Any, key: str) -> Session:
    """The user's active session for `key`, else 4404, whether the key is
    malformed, unknown or someone else's: which of them is nobody else's business."""
    try:
        SessionKey.parse(key)
    except SessionKeyError as exc:
        raise ChatError(NO_SUCH_CHAT, str(exc)) from None
    session = Session.objects.active(user, key)
    if session is None:
        raise ChatError(NO_SUCH_CHAT, "There is no such chat.")
    return session


def start_chat(user: Any, agent: Agent | None = None) -> Session:
    agent = agent or Agent.objects.default_for(user)
    # A random chat id keeps keys unguessable and unique across users.
    return Session.start(user, agent, WEB, secrets.token_hex(6))


def latest_chat(user: Any) -> Session | None:
    return (
        Session.objects.owned_by(user)
        .filter(channel=WEB, status=Session.Status.ACTIVE)
        .order_by("-last_activity_at")
        .first()
    )


def sidebar_chats(user: Any, limit: int = 50) -> list[Session]:
    return list(
        Session.objects.owned_by(user)
        .filter(status=Session.Status.ACTIVE)
        .select_related("agent")
        .order_by("-last_activity_at")[:limit]
    )


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


def note_message(session: Session, text: str) -> None:
    fields: dict[str, Any] = {"last_activity_at": timezone.now(), "updated_at": timezone.now()}
    if not session.title:
        session.title = Session.title_from(text)
        fields["title"] = session.title
    Session.objects.filter(pk=session.pk).update(**fields)


def add_usage(session: Session, usage: Usage) -> None:
    Session.objects.filter(pk=session.pk).update(**Session.adding(usage))


def meter(
    session: Session,
    next_prompt: list[dict[str, Any]] | None = None,
    context_tokens: int | None = None,
) -> dict[str, Any]:
    """Token totals and the size of the next prompt: `next_prompt` when the caller
    has it (a turn's last prompt and answer), else built as a turn would; its size
    is `context_tokens` when the model counted it (`read_meter`), else estimated."""
    # Only the counters: a full refresh would also drop the cached agent and owner,
    # which async callers (compaction) read next.
    session.refresh_from_db(fields=Session.TOKEN_FIELDS)
    messages = next_prompt or next_messages(session)
    endpoint = configured_endpoint()
    return {
        **session.usage.as_dict(),
        "context_tokens": estimate_prompt_tokens(messages)
        if context_tokens is None
        else context_tokens,
        "context_window": endpoint.context_window,
        "model": endpoint.model if not endpoint.is_local else endpoint.label,
    }


def next_messages(session: Session) -> list[dict[str, Any]]:
    return build_messages(session.owner, str(session.pk), session.agent.system_prompt)


async def read_meter(
    session: Session, next_prompt: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """`meter`, with the prompt counted by the model's tokenizer where it has one:
    the count is an HTTP call, made here, off the database thread."""
    messages = next_prompt or await database_sync_to_async(next_messages)(session)
    counted = await prompt_tokens(messages, configured_endpoint())
    return await database_sync_to_async(meter)(session, messages, counted)


def status_text(session: Session, readings: dict[str, Any], query_vector: np.ndarray | None) -> str:
    """/status: the meter's `readings` (`read_meter`), and why each memory is in the
    context of the latest message, recalled by its `query_vector` (None: by
    recency and importance only)."""
    m = readings
    share = m["context_tokens"] / m["context_window"]
    lines = [
        f"Model: {m['model']}",
        f"Session: {session.key} (started {session.created_at:%Y-%m-%d %H:%M}, "
        f"compacted {session.compaction_count} time{'' if session.compaction_count == 1 else 's'})",
        f"Tokens: {m['input']:,} in, {m['output']:,} out, {m['cache_read']:,} cache read, "
        f"{m['cache_write']:,} cache write",
        f"Context: about {m['context_tokens']:,} of {m['context_window']:,} tokens ({share:.0%})",
    ]
    return "\n".join(lines + recalled_lines(session, query_vector))


def latest_message(session: Session) -> str | None:
    latest = (
        Event.objects.owned_by(session.owner)
        .filter(session_id=str(session.pk), event_type=EventType.USER_MESSAGE)
        .order_by("-id")
        .first()
    )
    return latest.text if latest is not None else None


async def status(session: Session) -> str:
    """/status, its blocking parts off the database thread: the token count and
    the embedding of the latest message."""
    readings = await read_meter(session)
    latest = await database_sync_to_async(latest_message)(session)
    vector = None
    if latest is not None:
        vector = await sync_to_async(embed_query, thread_sensitive=False)(latest)
    return await database_sync_to_async(status_text)(session, readings, vector)


def recalled_lines(session: Session, query_vector: np.ndarray | None) -> list[str]:
    """Why each older memory is in the context of the latest message."""
    latest = latest_message(session)
    if latest is None:
        return []
    # Without a vector (no embedding model), recall by recency and importance only.
    query = latest if query_vector is not None else ""
    context = get_context(session.owner, str(session.pk), query, session.agent.name, query_vector)
    lines = []
    if context.session_recall:
        lines.append("Recalled when this session started:")
        lines += [
            f"- recall {item['score']:.2f}: [{item['date']}] {item['text'][:80]}"
            for item in context.session_recall
        ]
    recalled = context.recalled
    if not recalled:
        return [*lines, "Recalled memories: none for the latest message."]
    return [*lines, "Recalled memories (why each is in the context):"] + [
        f"- {item.branch}"
        + (f" {item.score:.2f}" if item.score is not None else "")
        + f": [{item.event.created_at:%Y-%m-%d}] {' '.join(item.event.text.split())[:80]}"
        for item in recalled
    ]


async def run_chat_turn(
    session: Session,
    text: str,
    emit: Emit,
    *,
    trusted: bool = False,
    approval_timeout: float | None = None,
    retry_of: int | None = None,
) -> TurnResult:
    """One turn in `session` (or its successor, if it went stale): the agent
    answers, usage is added, the meter read; `result.done()` ends it (the
    caller sends it, sessions_app.holder, after recording the input's end).
    Scheduled runs pass `trusted` and a short `approval_timeout`: nobody is
    watching them."""
    session, reason = await database_sync_to_async(ensure_fresh)(session)
    if reason is not None:
        await emit(SessionChanged(str(session.pk), reason))
    await database_sync_to_async(note_message)(session, text)
    request = TurnRequest(
        owner=session.owner,
        session_id=str(session.pk),
        agent_name=session.agent.name,
        agent_prompt=session.agent.system_prompt,
        trusted=trusted,
        approval_timeout=approval_timeout,
        retry_of=retry_of,
    )
    result = await run_turn(request, text, emit)
    await database_sync_to_async(add_usage)(session, result.usage)
    readings = await read_meter(session, result.next_prompt)
    if await database_sync_to_async(should_compact)(readings, session):
        share = readings["context_tokens"] / readings["context_window"]
        try:
            done = await compact(session, f"context {share:.0%} full")
        except CompactionError as exc:
            await emit(Error(f"Automatic compaction failed: {exc}."))
        else:
            await emit(SessionChanged(str(done.session.pk), "compacted"))
            readings = await read_meter(done.session)
    result.meter = readings
    return result
