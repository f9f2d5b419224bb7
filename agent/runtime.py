"""One agent turn: context → LLM → tools → … → a final answer.

Every step is stored as an Event and emitted as a protocol frame (docs/api.md,
"The websocket protocol") through `emit`. No exception escapes a turn: LLM
failures, bad tool calls and cancellation (/stop) all end with what was produced stored
and the cause reported.
A message's whole path, end to end: docs/chat-runtime.md#the-turn.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings

from agent import client_tools
from agent.answer_stream import AnswerStream, CallWritten, Repeating
from agent.client_tools import ClientTurn
from agent.frames import Emit, Error, EventFrame, Status
from agent.llm import (
    Completion,
    Endpoint,
    LLMClient,
    LLMError,
    ToolCall,
    Usage,
    configured_endpoint,
)
from agent.mcp import client as mcp_tools
from agent.prompt import TurnPrompt, estimate_request_tokens, start_turn
from agent.text_tool_calls import tool_call_in_text
from agent.tools import Tool, available_tools
from agent.tools.confirmation import confirmation
from agent.turn_calls import TurnCalls
from core.ownership import Owner
from memory import recording
from memory.models import UNKNOWN, UNRECALLED_IMPORTANCE, Event, EventType, Unknown
from memory.recall import record_recall
from memory.sources import answer_sources
from memory.workspace import DEFAULT_AGENT

log = logging.getLogger(__name__)

# How an answer ended that is not recalled later (memory.models.UNRECALLED_IMPORTANCE):
# cut off at max_answer_tokens, or stopped because it repeated itself.
REPEATED = "repetition"
REPEATING_NOTE = "The answer started repeating itself and was stopped."
UNRECALLED_ENDINGS = ("length", REPEATED)


@dataclass(frozen=True)
class Before:
    """What the session held before the turn's message, read with the session
    (sessions_app.turns): its last turn's text, the context of the message's key;
    whether it had a message (the first is auto-recall's); working memory's
    marker of it (memory.working); and the version of its owner's facts
    (agent.prompt.prompt_facts)."""

    text: str | None
    messaged: bool
    marker: tuple[int, int]
    facts: tuple[int, Any]


@dataclass(frozen=True)
class TurnRequest:
    owner: Owner
    session_id: str
    agent_name: str = DEFAULT_AGENT
    agent_prompt: str = ""
    trusted: bool = False
    approval_timeout: float | None = None  # None: [terminal] approval_timeout_seconds
    retry_of: int | None = None  # the user message this turn runs again (sessions_app.turns)
    edited: bool = False  # ...with new text (an edit)
    task: str = ""  # the scheduled task this turn is a run of: what its tools change is the task's
    endpoint: Endpoint | None = None  # the chat's model (agent.providers); None: config.toml's
    client: ClientTurn | None = None  # what an OpenAI-compatible client sent with the input
    before: Before | None = None  # None: asked of the database


@dataclass
class TurnResult:
    status: str  # completed | error | stopped | max_iterations
    usage: Usage = field(default_factory=Usage)
    answer: str = ""
    error: str = ""
    user_event_id: int | None = None
    # A completed turn's last prompt and its answer: about the next prompt's size.
    next_prompt: list[dict[str, Any]] | None = None
    # The turn's prompt, however it ended (None if it ended before it had one):
    # the next prompt is it with the exchange re-read, memory not gathered again.
    prompt: TurnPrompt | None = None


class Turn:
    def __init__(self, request: TurnRequest, emit: Emit, client: LLMClient | None = None) -> None:
        self.request = request
        self.emit = emit
        self.client = client or LLMClient(request.endpoint or configured_endpoint())
        self.usage = Usage()
        self.stream = AnswerStream(emit)  # the answer being streamed
        self.query = ""
        self.query_vector: Any = None
        self.prompt: TurnPrompt | None = None  # built once, when the turn starts
        self.user_event: Event  # the turn's message, stored first
        # What the session held before this turn's message, if read with it.
        self.before = request.before
        # The text of the session's last turn, for the next one's key (what this
        # turn writes follows it); unknown until the message is stored, if not given.
        self.said_last: str | Unknown | None = (
            request.before.text if request.before is not None else UNKNOWN
        )
        self.closed = False  # the turn's usage is kept with its message
        self.carried = Usage()  # a resumed turn's usage before it handed calls to the client
        self.calls = TurnCalls(request, emit, self.store)  # Neotask's tools, run here
        self.max_iterations: int = settings.NEOTASK["llm"]["max_iterations"]

    async def run(self, text: str) -> TurnResult:
        if self.request.client is not None and self.request.client.results:
            return await self.resume(self.request.client.results)
        message: dict[str, Any] = {"content": text}
        if self.request.retry_of is not None:
            message["retry_of"] = self.request.retry_of
            if self.request.edited:
                message["edited"] = True
        try:
            # For recall; also the message's own vector, stored with it.
            await self.embed(text)
        except asyncio.CancelledError:  # /stop this early: the message is kept all the same
            self.user_event = await self.store(EventType.USER_MESSAGE, message)
            await asyncio.shield(self.after_stop())
            return TurnResult("stopped", self.usage, user_event_id=self.user_event.pk)
        self.user_event = await self.store(
            EventType.USER_MESSAGE, message, vector=self.query_vector
        )
        result = await self.answer(self.user_event)
        result.user_event_id = self.user_event.pk
        if not self.closed:  # the turn ended without its closing event (cancelled in it)
            await database_sync_to_async(self.keep_usage)()
        return result

    async def resume(self, results: tuple[dict[str, str], ...]) -> TurnResult:
        """A turn that handed tool calls to the client goes on from their results:
        stored as the calls' results, then answered as the same message's turn."""
        request = self.request
        message, answered = await database_sync_to_async(client_tools.answered)(
            request.owner, request.session_id, results
        )
        if message is None or not answered:  # checked on arrival; the chat moved on since
            await self.emit(Error(client_tools.NOTHING_WAITS))
            return TurnResult("error", error=client_tools.NOTHING_WAITS)
        self.user_event = message
        self.before = None  # (its message is not new)
        self.calls.outside_text = True  # the client's tools' answers
        self.carried = Usage(**(message.data or {}).get("turn_usage", {}))
        for result in answered:
            await self.store(EventType.TOOL_RESULT, result, tool_name=result["name"])
        try:
            await self.embed(message.text)
        except asyncio.CancelledError:
            await asyncio.shield(self.after_stop())
            return TurnResult("stopped", self.usage, user_event_id=message.pk)
        ended = await self.answer(message)
        ended.user_event_id = message.pk
        if not self.closed:
            await database_sync_to_async(self.keep_usage)()
        return ended

    async def embed(self, text: str) -> None:
        """The message's vector. Once per turn: every round of tool calls recalls
        by the same question. The turn's first sign of life goes out before it."""
        await self.emit(Status.memory())
        self.query_vector = await query_vector(text)
        self.query = text if self.query_vector is not None else ""

    async def answer(self, user_event: Event) -> TurnResult:
        try:
            recalled, prompt, messages = await database_sync_to_async(self.start)(user_event)
            self.prompt = prompt
            self.calls.outside_text = self.calls.outside_text or prompt.outside_text
            if recalled is not None:
                await self.emit(EventFrame.of(recalled))
            result = await self.loop(prompt, messages)
        except asyncio.CancelledError:
            # /stop: keep what was said, mark it, and end the turn normally.
            await asyncio.shield(self.after_stop())
            result = TurnResult("stopped", self.usage, answer=self.stream.partial)
        result.prompt = self.prompt
        return result

    def start(self, user_event: Event) -> tuple[Event | None, TurnPrompt, list[dict[str, Any]]]:
        """In one trip to the database: auto-recall by the message's vector, and the
        turn's prompt, its memory gathered once (agent.prompt)."""
        request = self.request
        before = self.before
        first = None if before is None else not before.messaged
        recalled = record_recall(
            request.owner,
            request.agent_name,
            request.session_id,
            user_event.text,
            self.query_vector,
            first=first,
        )
        # The session's, and the message this turn stored since.
        marker = None if before is None else (before.marker[0] + 1, user_event.pk)
        prompt, messages = start_turn(
            request.owner,
            request.session_id,
            request.agent_prompt,
            query=self.query,
            agent=request.agent_name,
            query_vector=self.query_vector,
            client_system=request.client.system if request.client is not None else "",
            marker=marker,
            facts_version=None if request.before is None else request.before.facts,
        )
        return recalled, prompt, messages

    async def offer(self) -> tuple[list[Tool], list[dict[str, Any]], set[str]]:
        """Neotask's tools, run here: the registry's and the owner's MCP servers'
        (as last listed, one query); and an OpenAI-compatible client's own."""
        mcp = await database_sync_to_async(mcp_tools.tools_for)(self.request.owner)
        return client_tools.offered(self.request.client, [*available_tools(), *mcp])

    async def round_messages(self, prompt: TurnPrompt) -> list[dict[str, Any]]:
        """A later round's prompt: memory once per turn, the exchange re-read."""
        return await database_sync_to_async(prompt.messages)()

    async def loop(self, prompt: TurnPrompt, messages: list[dict[str, Any]]) -> TurnResult:
        tools, schemas, client_tools_named = await self.offer()
        self.calls.offered = tools
        max_iterations = self.max_iterations
        previous: set[tuple[str, str]] = set()  # the calls of the round before
        for round_number in range(max_iterations):
            if round_number:
                messages = await self.round_messages(prompt)
            self.stream.restart(tools)
            await self.emit(Status.model(estimate_request_tokens(messages, schemas)))
            try:
                on_delta = self.stream.on_delta
                completion = await self.client.stream(messages, schemas, on_delta=on_delta)
            except LLMError as exc:
                await self.stream.sent()
                return await self.failed(exc)
            except CallWritten as written:
                # The stream is closed, so the model stops; its usage is not reported.
                completion = Completion(content=written.call, finish_reason="stop")
            except Repeating as repeating:  # closed too; the loop's copies are dropped
                completion = Completion(content=repeating.loop.kept, finish_reason=REPEATED)
            await self.stream.sent()
            self.usage += completion.usage
            if not completion.tool_calls and (
                call := tool_call_in_text(completion.content, tools, f"call_text_{round_number}")
            ):
                # Stored as the call it is, so the next round's prompt shows a call made.
                completion.tool_calls, completion.content = [call], ""
                if same_call(call) in previous:
                    return await self.repeated(call, completion, messages)
            previous = {same_call(call) for call in completion.tool_calls}
            if not completion.tool_calls and self.calls.ran and not completion.content.strip():
                return await self.confirm(completion, messages)
            await self.store(
                EventType.ASSISTANT_RESPONSE,
                {
                    "content": completion.content,
                    "tool_calls": [call.as_openai() for call in completion.tool_calls],
                    "usage": completion.usage.as_dict(),
                    "finish_reason": completion.finish_reason,
                    **(await self.sources(prompt, completion)),
                },
                closing=not completion.tool_calls and completion.finish_reason != REPEATED,
                **unrecalled(completion),
            )
            self.stream.partial = ""
            if completion.finish_reason == REPEATED and not completion.tool_calls:
                stopped = {"content": REPEATING_NOTE, "kind": REPEATED}
                await self.store(EventType.SYSTEM, stopped, closing=True)
            if not completion.tool_calls:
                answered = {"role": "assistant", "content": completion.content}
                return TurnResult(
                    "completed",
                    self.usage,
                    answer=completion.content,
                    next_prompt=[*messages, answered],
                )
            handed = [call for call in completion.tool_calls if call.name in client_tools_named]
            for call in completion.tool_calls:
                if call in handed:  # not run: stored, it waits for the client's result
                    data = client_tools.handed_over(call)
                    await self.store(EventType.TOOL_CALL, data, tool_name=call.name)
                else:
                    await self.calls.execute(call)
            if handed:  # the client runs them, and sends their results in its next request
                await database_sync_to_async(self.keep_usage)()
                return TurnResult("completed", self.usage, answer=completion.content)
        note = (
            f"The turn stopped after {max_iterations} rounds of tool calls without a final "
            "answer ([llm] max_iterations)."
        )
        await self.store(
            EventType.SYSTEM, {"content": note, "kind": "max_iterations"}, closing=True
        )
        return TurnResult("max_iterations", self.usage, error=note)

    async def sources(self, prompt: TurnPrompt, completion: Completion) -> dict[str, Any]:
        """The memory files a closing answer drew on, of those its prompt carried
        (memory.sources), for its event to keep; nothing if none."""
        if completion.tool_calls or not prompt.chunks:
            return {}
        request = self.request
        found = await database_sync_to_async(answer_sources)(
            request.owner,
            request.agent_name,
            completion.content,
            prompt.chunks,
            self.user_event.text,
        )
        return {"sources": found} if found else {}

    async def repeated(
        self, call: ToolCall, completion: Completion, messages: list[dict[str, Any]]
    ) -> TurnResult:
        """A small model (Qwen2.5-Coder-0.5B) answers a tool's result by writing the
        same call again, round after round until max_iterations: it is not run
        twice, and the turn ends there, on what its calls did. (A model that makes
        real tool calls may repeat one on purpose, to poll: those run.) The note is
        for the curious, in the tool fold (_event.html)."""
        note = f"The model asked for {call.name} again with the same arguments; it ran once."
        data = {"content": note, "kind": "repeated_call", "name": call.name}
        if not self.calls.ran:  # (the calls before were the client's: nothing to confirm)
            await self.store(EventType.SYSTEM, data, closing=True)
            return TurnResult("completed", self.usage)
        await self.store(EventType.SYSTEM, data)
        return await self.confirm(completion, messages)

    async def confirm(self, completion: Completion, messages: list[dict[str, Any]]) -> TurnResult:
        """The end of a turn whose model wrote nothing after its tool calls: what
        they did, in a plain sentence (agent.tools.confirmation), as its answer.
        Stored without a text of its own, so memory search and recall never bring
        it back as the model's words, and marked, so the model is not shown it as
        its answer (agent.prompt.history_messages)."""
        said = confirmation(self.calls.ran)
        data = {
            "content": said,
            "confirmation": True,
            "confirms": [call.event_id for call in self.calls.ran],  # forgetting one redacts it
            # Every call told by its memory notice ("Remembered: …" with Undo): the chat
            # shows that alone, not this sentence again beside it (_event.html). The
            # answer stays for API clients, which see no notice.
            "noticed": all(call.event_id in self.calls.noticed for call in self.calls.ran),
            "tool_calls": [],
            "usage": completion.usage.as_dict(),
            "finish_reason": completion.finish_reason,
        }
        await self.store(EventType.ASSISTANT_RESPONSE, data, closing=True, text="")
        return TurnResult("completed", self.usage, answer=said, next_prompt=messages)

    async def failed(self, exc: LLMError) -> TurnResult:
        self.usage += exc.partial.usage
        if self.stream.partial:
            await self.store(
                EventType.ASSISTANT_RESPONSE,
                {"content": self.stream.partial, "interrupted": True, "reason": exc.kind},
            )
        message = str(exc)
        await self.store(EventType.ERROR, {"content": message, "kind": exc.kind}, closing=True)
        await self.emit(Error(message))
        return TurnResult("error", self.usage, answer=self.stream.partial, error=message)

    async def after_stop(self) -> None:
        await self.stream.stopped()
        await self.calls.stopped()
        if self.stream.partial:
            await self.store(
                EventType.ASSISTANT_RESPONSE,
                {"content": self.stream.partial, "interrupted": True, "reason": "stopped"},
            )
        stopped = {"content": "Stopped by the user.", "kind": "stopped"}
        await self.store(EventType.SYSTEM, stopped, closing=True)

    async def store(
        self, event_type: str, data: dict[str, Any], *, closing: bool = False, **fields: Any
    ) -> Event:
        """Record an event of the turn and send it. The `closing` one, which ends the
        turn, also keeps the turn's usage with its message, in the same trip."""
        event = await database_sync_to_async(self.record)(event_type, data, closing, fields)
        await self.emit(EventFrame.of(event))
        return event

    def record(
        self, event_type: str, data: dict[str, Any], closing: bool, fields: dict[str, Any]
    ) -> Event:
        request = self.request
        event = recording.record(
            request.owner,
            request.session_id,
            event_type,
            data,
            agent=request.agent_name,
            turn_before=self.said_last,
            **fields,
        )
        if event_type in EventType.TURNS and event.text:
            self.said_last = event.text
        if closing:
            self.keep_usage()
        return event

    def keep_usage(self) -> None:
        """The turn's usage (all its LLM calls) kept with the message that caused it."""
        self.user_event.data["turn_usage"] = (self.carried + self.usage).as_dict()
        self.user_event.save(update_fields=["data"])
        self.closed = True


def unrecalled(completion: Completion) -> dict[str, Any]:
    """A cut-off or looping answer stays in its chat but is never recalled: a later
    turn would read it as something said (SmolLM2's loops came back as memories)."""
    if completion.finish_reason in UNRECALLED_ENDINGS:
        return {"importance": UNRECALLED_IMPORTANCE}
    return {}


def same_call(call: ToolCall) -> tuple[str, str]:
    """What makes two calls the same: the tool, and the arguments however spaced or ordered."""
    try:
        arguments = json.dumps(json.loads(call.arguments), sort_keys=True)
    except ValueError:
        arguments = call.arguments
    return call.name, arguments


async def query_vector(text: str) -> Any:
    """The message's embedding for recall, made with the other turns' of the
    moment (memory.embeddings.embed_together); None (recall by recency and
    importance only) if the embedding model is unavailable."""
    from memory.embeddings import embed_together

    try:
        return await embed_together(text)
    except Exception:
        log.warning("no embedding for recall; similarity search skipped", exc_info=True)
        return None


def embed_query(text: str) -> Any:
    """The message's embedding for recall; None (recall by recency and
    importance only) if the embedding model is unavailable."""
    from memory.embeddings import embed_text

    try:
        return embed_text(text)
    except Exception:
        log.warning("no embedding for recall; similarity search skipped", exc_info=True)
        return None


async def run_turn(
    request: TurnRequest, text: str, emit: Emit, client: LLMClient | None = None
) -> TurnResult:
    return await Turn(request, emit, client).run(text)
