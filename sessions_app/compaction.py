"""Compaction: free the context window without losing anything.

1. Memory flush: the agent is asked, silently, to save durable facts with
   remember_fact (a failure here is logged, not fatal); not when outside text
   (an MCP server's answer, a search of memory) is in the conversation.
2. The older messages are summarised by the fast model. If that fails,
   nothing has changed.
3. In one transaction: the session is archived (still readable, every event
   kept and searchable) and a fresh one continues it, opening with a
   compaction event that holds the summary and names the recent events it
   carries over; get_context shows those after the summary.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import transaction

from agent.llm import Endpoint, LLMClient, LLMError
from agent.prompt import history_messages, is_outside_text
from agent.providers import chat_endpoint
from agent.quiet_turn import QuietTurn
from agent.runtime import TurnRequest
from agent.tools import ToolError, get_tool
from memory import recording
from memory.models import Event, EventType, transcript
from sessions_app.models import Session

log = logging.getLogger(__name__)

FLUSH_ROUNDS = 2
TRANSCRIPT_CHARS = 60_000  # what the summary call reads at most, newest last
SUMMARY_PROMPT = (
    "You are compacting a conversation so that it can continue in a fresh context. "
    "Write a concise summary for your future self: the user's goals, decisions, facts "
    "about the user and the people, places and dates mentioned, open tasks and "
    "questions. Use short bullet points. Do not invent anything."
)
FLUSH_PROMPT = (
    "The conversation above is about to be compacted. Save every durable fact about the "
    "user that is not saved yet by calling remember_fact; then answer DONE."
)


class CompactionError(Exception):
    """Compaction did not happen; the session is unchanged."""


@dataclass
class Compacted:
    archived: Session
    session: Session
    summarised: int
    carried_over: int


def split(session: Session, keep: int) -> tuple[list[Event], list[Event]]:
    """The events to summarise and the recent ones to carry over, split at a
    user message so that no exchange is cut in two."""
    events = list(
        session.events().filter(event_type__in=EventType.CONTENT).order_by("created_at", "id")
    )
    start = max(0, len(events) - keep)
    while start > 0 and events[start].event_type != EventType.USER_MESSAGE:
        start -= 1
    return events[:start], events[start:]


async def flush_memory(
    session: Session, recent_messages: list[dict[str, Any]], endpoint: Endpoint
) -> int:
    """Let the agent save durable facts first, in a turn of its own that nobody
    watches (agent.quiet_turn); returns how many it saved."""
    request = TurnRequest(
        owner=session.owner,
        session_id=str(session.pk),
        agent_name=session.agent.name,
        endpoint=endpoint,
    )
    turn = QuietTurn(request, [get_tool("remember_fact")], FLUSH_ROUNDS)
    ran = await turn.rounds([*recent_messages, {"role": "user", "content": FLUSH_PROMPT}])
    return sum(not call.error for call in ran)


async def summarise(events: list[Event], endpoint: Endpoint) -> str:
    client = LLMClient(endpoint)
    completion = await client.stream(
        [
            {"role": "system", "content": SUMMARY_PROMPT},
            {"role": "user", "content": transcript(events, TRANSCRIPT_CHARS)},
        ]
    )
    summary = completion.content.strip()
    if not summary:
        raise CompactionError("the model returned an empty summary")
    return summary


def replace_session(
    session: Session, summary: str, older: list[Event], recent: list[Event], reason: str
) -> Session:
    with transaction.atomic():
        fresh = session.continue_as(compaction_count=session.compaction_count + 1)
        if fresh is None:
            raise CompactionError("the session changed meanwhile (another tab reset it?)")
        compaction = recording.record(
            session.owner,
            str(fresh.pk),
            EventType.COMPACTION,
            {
                "content": summary,
                "reason": reason,
                "summarised": len(older),
                "first_event_id": older[0].pk,
                "last_event_id": older[-1].pk,
                "carried_over": [event.pk for event in recent],
                "continues_from": str(session.pk),
            },
            agent=session.agent.name,
        )
        compaction.condensed.set(older)  # what it stands for, kept in the earlier session
    return fresh


async def compact(session: Session, reason: str = "/compact") -> Compacted:
    """Compact `session`; raises CompactionError (the session unchanged) if it cannot."""
    keep = settings.NEOTASK["sessions"]["compaction_keep_recent"]
    older, recent = await database_sync_to_async(split)(session, keep)
    # The chat's model writes it: the one whose window it must fit.
    endpoint = await database_sync_to_async(chat_endpoint)(session)
    fast = await database_sync_to_async(chat_endpoint)(session, fast=True)
    if len(older) < 2:
        raise CompactionError("there is not enough conversation to compact yet")
    try:
        # Nobody could approve a fact that outside text in the chat asked for
        # (agent.tools.call_tool): then nothing is flushed.
        if not any(is_outside_text(event) for event in older + recent):
            await flush_memory(session, history_messages(older + recent)[-40:], endpoint)
    except (LLMError, ToolError):
        log.warning("memory flush before compaction failed; compacting anyway", exc_info=True)
    try:
        summary = await summarise(older, fast)
    except LLMError as exc:
        raise CompactionError(f"the summary could not be written ({exc})") from None
    fresh = await database_sync_to_async(replace_session)(session, summary, older, recent, reason)
    return Compacted(session, fresh, len(older), len(recent))
