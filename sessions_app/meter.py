"""A chat's token meter — what the session has used and how full the next prompt
is — and /status, which shows it with why each memory is in the context.

The model's own token count is an HTTP call (the embedded llama.cpp server's
/tokenize), so `read_meter` makes it off the database thread; `meter` alone
estimates, for pages that must not wait for the model.
A message's whole path, end to end: docs/chat-runtime.md#the-turn."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async

from agent.llm import Endpoint, as_sent
from agent.prompt import build_messages, estimate_prompt_tokens, prompt_tokens
from agent.providers import chat_endpoint
from agent.runtime import embed_query
from core.markdown import escape_markdown as md
from memory.models import Event, EventType, Fact
from memory.provenance import Provenance, provenance_of
from memory.retrieval import get_context
from sessions_app.models import Session


@dataclass(frozen=True)
class TokenMeter:
    """The session's token counters, and the next prompt's size in the model's window."""

    input: int
    output: int
    cache_read: int
    cache_write: int
    context_tokens: int
    context_window: int
    model: str

    @property
    def share(self) -> float:
        """How full the window is with the next prompt (1.0 is full)."""
        return self.context_tokens / self.context_window

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def meter(
    session: Session,
    next_prompt: list[dict[str, Any]] | None = None,
    context_tokens: int | None = None,
) -> TokenMeter:
    """Token totals and the size of the next prompt: `next_prompt` when the caller
    has it (a turn's last prompt and answer), else built as a turn would; its size
    is `context_tokens` when the model counted it (`read_meter`), else estimated."""
    # Only the counters: a full refresh would also drop the cached agent and owner,
    # which async callers (compaction) read next.
    session.refresh_from_db(fields=Session.TOKEN_FIELDS)
    return reading(session, next_prompt or next_messages(session), context_tokens)


def reading(
    session: Session,
    messages: list[dict[str, Any]],
    context_tokens: int | None = None,
    endpoint: Endpoint | None = None,
) -> TokenMeter:
    """The meter of `session` as it is in memory, with `messages` as the next prompt,
    in the window of its model (`endpoint`, found when not given)."""
    endpoint = endpoint or chat_endpoint(session)
    usage = session.usage
    return TokenMeter(
        input=usage.input,
        output=usage.output,
        cache_read=usage.cache_read,
        cache_write=usage.cache_write,
        context_tokens=estimate_prompt_tokens(as_sent(messages, endpoint))
        if context_tokens is None
        else context_tokens,
        context_window=endpoint.context_window,
        model=endpoint.model if not endpoint.is_local else endpoint.label,
    )


def next_messages(session: Session) -> list[dict[str, Any]]:
    return build_messages(session.owner, str(session.pk), session.agent.system_prompt)


def prepare(
    session: Session, next_prompt: list[dict[str, Any]] | None
) -> tuple[list[dict[str, Any]], Endpoint]:
    return next_prompt or next_messages(session), chat_endpoint(session)


async def read_meter(
    session: Session, next_prompt: list[dict[str, Any]] | None = None
) -> TokenMeter:
    """`meter`, with the prompt counted by the model's tokenizer where it has one:
    the count is an HTTP call, made here, off the database thread."""
    messages, endpoint = await database_sync_to_async(prepare)(session, next_prompt)
    counted = await prompt_tokens(messages, endpoint)
    return await database_sync_to_async(meter)(session, messages, counted)


async def status(session: Session) -> str:
    """/status, its blocking parts off the database thread: the token count and
    the embedding of the latest message."""
    readings = await read_meter(session)
    latest = await database_sync_to_async(latest_message)(session)
    vector = None
    if latest is not None:
        vector = await sync_to_async(embed_query, thread_sensitive=False)(latest)
    return await database_sync_to_async(status_text)(session, readings, vector)


def status_text(session: Session, readings: TokenMeter, query_vector: np.ndarray | None) -> str:
    """/status, as Markdown (the chat lays it out as lists): the meter's `readings`
    (`read_meter`), and why each memory is in the context of the latest message,
    recalled by its `query_vector` (None: by recency and importance only)."""
    m = readings
    compactions = session.compaction_count
    lines = [
        f"- **Model:** {md(m.model)}",
        f"- **Session:** {md(session.key)} (started {session.created_at:%Y-%m-%d %H:%M}, "
        f"compacted {compactions} time{'' if compactions == 1 else 's'})",
        f"- **Tokens:** {m.input:,} in, {m.output:,} out, {m.cache_read:,} cache read, "
        f"{m.cache_write:,} cache write",
        f"- **Context:** about {m.context_tokens:,} of {m.context_window:,} tokens ({m.share:.0%})",
    ]
    return "\n".join(lines + recalled_lines(session, query_vector) + fact_lines(session))


def heading(text: str) -> str:
    """A block's title in /status, apart from the list before and after it."""
    return f"\n**{text}**\n"


STATUS_FACTS = 10  # the newest; the facts page lists them all


def fact_lines(session: Session) -> list[str]:
    """The facts changed last, each with where it came from."""
    owned = Fact.objects.owned_by(session.owner)
    facts = list(owned.select_related("origin_event").order_by("-updated_at")[:STATUS_FACTS])
    if not facts:
        return []
    told = provenance_of(facts)
    lines = [heading("Facts changed last (where each came from):")]
    for fact in facts:
        where = told.get(fact.pk)
        unverified = " (unverified)" if fact.unverified else ""
        lines.append(
            f"- {md(str(fact))}: {md(' '.join(fact.value.split())[:60])}{unverified}"
            + (f" — {provenance(where)}" if where else "")
        )
    if (more := owned.count() - len(facts)) > 0:
        lines.append(f"\n… and {more} more on the facts page.")
    return lines


def one_line(text: str, limit: int = 80) -> str:
    """A memory quoted in a list item: on one line, clipped, shown as it is."""
    return md(" ".join(text.split())[:limit])


def provenance(where: Provenance) -> str:
    """Where a fact came from, linked to the turn that said it."""
    return f"[{md(where.text)}]({where.url})" if where.url else md(where.text)


def latest_message(session: Session) -> str | None:
    latest = (
        Event.objects.owned_by(session.owner)
        .filter(session_id=str(session.pk), event_type=EventType.USER_MESSAGE)
        .order_by("-id")
        .first()
    )
    return latest.text if latest is not None else None


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
        lines.append(heading("Recalled when this session started:"))
        lines += [
            f"- recall {item['score']:.2f}: {md(item['date'])} · {one_line(item['text'])}"
            for item in context.session_recall
        ]
    recalled = context.recalled
    if not recalled:
        return [*lines, heading("Recalled memories: none for the latest message.")]
    return [*lines, heading("Recalled memories (why each is in the context):")] + [
        f"- {md(item.branch)}"
        + (f" {item.score:.2f}" if item.score is not None else "")
        + f": {item.event.created_at:%Y-%m-%d} · {one_line(item.event.text)}"
        for item in recalled
    ]
