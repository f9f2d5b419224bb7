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
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.conf import settings

from agent import approvals, macros, mcp_tools
from agent.frames import ApprovalAsked, Delta, Emit, Error, EventFrame, Status
from agent.llm import (
    Completion,
    Endpoint,
    LLMClient,
    LLMError,
    ToolCall,
    Usage,
    configured_endpoint,
)
from agent.prompt import TurnPrompt, estimate_request_tokens, start_turn
from agent.repetition import Loop, RepetitionWatch
from agent.text_tool_calls import call_written_so_far, tool_call_in_text
from agent.tools import (
    Ran,
    Tool,
    ToolContext,
    ToolError,
    available_tools,
    brings_outside_text,
    call_tool,
)
from agent.tools.confirmation import confirmation
from agent.tools.registry import JSON_TYPES
from core.ownership import Owner
from memory import recording, undo
from memory.models import UNKNOWN, UNRECALLED_IMPORTANCE, Event, EventType, Unknown
from memory.recall import record_recall
from memory.sources import answer_sources
from memory.workspace import DEFAULT_AGENT

log = logging.getLogger(__name__)

# Streamed frames when the event loop falls behind: a sender that starts this
# many seconds late sends a frame per DELTA_TICK at most (Turn.send_deltas).
BEHIND = 0.005
DELTA_TICK = 0.03


class CallWritten(Exception):
    """The model wrote a whole tool call as text and goes on writing (the call is `call`)."""

    def __init__(self, call: str) -> None:
        super().__init__(call)
        self.call = call


class Repeating(Exception):
    """The answer streamed so far ends in a loop (agent.repetition): the stream is
    closed, and what came before the loop's second copy is the answer."""

    def __init__(self, loop: Loop) -> None:
        super().__init__(loop.period)
        self.loop = loop


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


@dataclass(frozen=True)
class ClientTurn:
    """What an OpenAI-compatible client (sessions_app.openai_compat) sends with its
    input. Its system message joins this turn's prompt; its tools are offered to
    the model, and a call of one is not run here: it ends the turn and goes back
    to the client, whose next request brings the `results` the turn goes on from."""

    system: str = ""
    tools: tuple[dict[str, Any], ...] = ()  # OpenAI tool schemas, checked by the caller
    results: tuple[dict[str, str], ...] = ()  # {"tool_call_id", "content"}

    @property
    def tool_names(self) -> set[str]:
        return {tool["function"]["name"] for tool in self.tools}

    def readable_tools(self) -> list[Tool]:
        """The client's tools as agent.text_tool_calls checks a call written as text
        (the embedded Qwen's way): with the arguments of plain types only, so a
        call using others stays text rather than passing unchecked. Never run here."""
        return [readable_tool(schema["function"]) for schema in self.tools]

    def as_json(self) -> dict[str, Any]:
        return {"system": self.system, "tools": list(self.tools), "results": list(self.results)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClientTurn:
        return cls(data["system"], tuple(data["tools"]), tuple(data["results"]))


def readable_tool(function: dict[str, Any]) -> Tool:
    parameters = function.get("parameters") or {}
    given, needed = parameters.get("properties"), parameters.get("required")
    properties = {
        name: spec
        for name, spec in (given.items() if isinstance(given, dict) else ())
        if isinstance(spec, dict) and spec.get("type") in JSON_TYPES
    }
    required = (
        [name for name in needed if isinstance(name, str)] if isinstance(needed, list) else []
    )
    return Tool(
        name=function["name"],
        description=function.get("description", ""),
        parameters={"type": "object", "properties": properties, "required": required},
        run=run_by_the_client,
    )


def run_by_the_client(context: ToolContext, arguments: dict[str, Any]) -> str:
    raise ToolError("This tool is the client's: its calls go back to the client.")


def pending_client_calls(owner: Owner, session_id: str) -> tuple[Event | None, dict[str, str]]:
    """The session's latest user message, and the client's tool calls made since
    that wait for their result (id → tool name)."""
    events = Event.objects.owned_by(owner).filter(session_id=session_id)
    message = events.filter(event_type=EventType.USER_MESSAGE).order_by("-pk").first()
    if message is None:
        return None, {}
    since = events.filter(pk__gt=message.pk).order_by("pk")
    calls = since.filter(event_type=EventType.TOOL_CALL, data__client=True)
    pending = {call.data["id"]: call.data["name"] for call in calls}
    for result in since.filter(event_type=EventType.TOOL_RESULT):
        pending.pop((result.data or {}).get("tool_call_id"), None)
    return message, pending


@dataclass
class TurnResult:
    status: str  # completed | error | stopped | max_iterations
    usage: Usage = field(default_factory=Usage)
    answer: str = ""
    error: str = ""
    user_event_id: int | None = None
    # A completed turn's last prompt and its answer: about the next prompt's size.
    next_prompt: list[dict[str, Any]] | None = None


class Turn:
    def __init__(self, request: TurnRequest, emit: Emit, client: LLMClient | None = None) -> None:
        self.request = request
        self.emit = emit
        self.client = client or LLMClient(request.endpoint or configured_endpoint())
        self.usage = Usage()
        self.partial = ""  # text streamed since the last stored answer
        self.watch = RepetitionWatch()  # on the answer being streamed
        self.previous_tool: macros.ToolUse | None = None
        self.pending_approval: approvals.ApprovalRequest | None = None
        self.query = ""
        self.query_vector: Any = None
        self.user_event: Event  # the turn's message, stored first
        # What the session held before this turn's message, if read with it.
        self.before = request.before
        # The text of the session's last turn, for the next one's key (what this
        # turn writes follows it); unknown until the message is stored, if not given.
        self.said_last: str | Unknown | None = (
            request.before.text if request.before is not None else UNKNOWN
        )
        self.closed = False  # the turn's usage is kept with its message
        # Deltas not sent yet, the task sending them, when it was asked to and
        # when it last sent a frame (event loop times).
        self.unsent = ""
        self.sender: asyncio.Task | None = None
        self.asked_at = self.sent_at = -DELTA_TICK
        self.offered: list[Tool] = []  # the tools of the round being answered
        self.carried = Usage()  # a resumed turn's usage before it handed calls to the client
        # Text from outside the person and the agent entered the turn (a tool's answer,
        # a recalled document): from then on a lasting change asks (call_tool).
        self.outside_text = False
        self.ran: list[Ran] = []  # the calls run, for a turn that ends without words
        self.noticed: set[int] = set()  # of those, the calls a memory notice tells of

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
        message, pending = await database_sync_to_async(pending_client_calls)(
            request.owner, request.session_id
        )
        answered = [result for result in results if result["tool_call_id"] in pending]
        if message is None or not answered:  # checked on arrival; the chat moved on since
            error = "None of these tool results answers a call waiting in this chat."
            await self.emit(Error(error))
            return TurnResult("error", error=error)
        self.user_event = message
        self.before = None  # (its message is not new)
        self.outside_text = True  # the client's tools' answers
        self.carried = Usage(**(message.data or {}).get("turn_usage", {}))
        for result in answered:
            call_id = result["tool_call_id"]
            await self.store(
                EventType.TOOL_RESULT,
                {
                    "tool_call_id": call_id,
                    "name": pending[call_id],
                    "content": result["content"],
                    "is_error": False,
                    "client": True,
                },
                tool_name=pending[call_id],
            )
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
            self.outside_text = self.outside_text or prompt.outside_text
            if recalled is not None:
                await self.emit(EventFrame.of(recalled))
            return await self.loop(prompt, messages)
        except asyncio.CancelledError:
            # /stop: keep what was said, mark it, and end the turn normally.
            await asyncio.shield(self.after_stop())
            return TurnResult("stopped", self.usage, answer=self.partial)

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

    def own_tools(self, mcp: list[Tool]) -> list[Tool]:
        """Neotask's tools, run here: the registry's and the owner's MCP servers'.
        An OpenAI-compatible client's turn runs only the tools it offered (none if
        it offered none), unless [llm] mix_client_tools mixes Neotask's in (a
        client's tool wins a shared name)."""
        own = [*available_tools(), *mcp]
        client = self.request.client
        if client is None:
            return own
        if not settings.NEOTASK["llm"]["mix_client_tools"]:
            return []
        return [tool for tool in own if tool.name not in client.tool_names]

    async def loop(self, prompt: TurnPrompt, messages: list[dict[str, Any]]) -> TurnResult:
        # The owner's MCP servers' tools, as last listed (one query).
        mcp = await database_sync_to_async(mcp_tools.tools_for)(self.request.owner)
        tools = self.own_tools(mcp)
        client = self.request.client
        client_tools = client.tool_names if client is not None else set()
        schemas = [tool.schema() for tool in tools]
        if client is not None:
            schemas += list(client.tools)
            tools += client.readable_tools()  # for calls written as text
        self.offered = tools
        max_iterations = settings.NEOTASK["llm"]["max_iterations"]
        previous: set[tuple[str, str]] = set()  # the calls of the round before
        for round_number in range(max_iterations):
            if round_number:  # memory once per turn; later rounds re-read the exchange
                messages = await database_sync_to_async(prompt.messages)()
            self.partial = ""
            self.watch = RepetitionWatch()
            await self.emit(Status.model(estimate_request_tokens(messages, schemas)))
            try:
                completion = await self.client.stream(messages, schemas, on_delta=self.on_delta)
            except LLMError as exc:
                await self.deltas_sent()
                return await self.failed(exc)
            except CallWritten as written:
                # The stream is closed, so the model stops; its usage is not reported.
                completion = Completion(content=written.call, finish_reason="stop")
            except Repeating as repeating:  # closed too; the loop's copies are dropped
                completion = Completion(content=repeating.loop.kept, finish_reason=REPEATED)
            await self.deltas_sent()
            self.usage += completion.usage
            if not completion.tool_calls and (
                call := tool_call_in_text(completion.content, tools, f"call_text_{round_number}")
            ):
                # Stored as the call it is, so the next round's prompt shows a call made.
                completion.tool_calls, completion.content = [call], ""
                if same_call(call) in previous:
                    return await self.repeated(call, completion, messages)
            previous = {same_call(call) for call in completion.tool_calls}
            if not completion.tool_calls and self.ran and not completion.content.strip():
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
            self.partial = ""
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
            handed = [call for call in completion.tool_calls if call.name in client_tools]
            for call in completion.tool_calls:
                if call in handed:
                    await self.hand_over(call)
                else:
                    await self.execute(call)
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
        if not self.ran:  # (the calls before were the client's: nothing to confirm)
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
        said = confirmation(self.ran)
        data = {
            "content": said,
            "confirmation": True,
            "confirms": [call.event_id for call in self.ran],  # forgetting one redacts it
            # Every call told by its memory notice ("Remembered: …" with Undo): the chat
            # shows that alone, not this sentence again beside it (_event.html). The
            # answer stays for API clients, which see no notice.
            "noticed": all(call.event_id in self.noticed for call in self.ran),
            "tool_calls": [],
            "usage": completion.usage.as_dict(),
            "finish_reason": completion.finish_reason,
        }
        await self.store(EventType.ASSISTANT_RESPONSE, data, closing=True, text="")
        return TurnResult("completed", self.usage, answer=said, next_prompt=messages)

    async def on_delta(self, text: str) -> None:
        self.partial += text
        if "{" in text and (call := call_written_so_far(self.partial, self.offered)):
            raise CallWritten(call)
        if (loop := self.watch.loop_in(self.partial)) is not None:
            raise Repeating(loop)
        self.unsent += text
        if self.sender is None or self.sender.done():
            self.asked_at = asyncio.get_running_loop().time()
            self.sender = asyncio.create_task(self.send_deltas())

    async def send_deltas(self) -> None:
        """Send what is unsent, at once while the process keeps up. When the
        event loop is behind (the sender started over BEHIND after it was asked
        for), a frame per tick at most: the deltas of that tick go together, so
        the frames to write stop growing with the token rate just when the
        process cannot write them all (100 chats x 50 tokens/s on one worker);
        a fixed tick would add its wait to every delta of a quiet server."""
        loop = asyncio.get_running_loop()
        behind = loop.time() - self.asked_at > BEHIND
        while self.unsent:
            if behind and (wait := self.sent_at + DELTA_TICK - loop.time()) > 0:
                await asyncio.sleep(wait)
            text, self.unsent = self.unsent, ""
            self.sent_at = loop.time()
            await self.emit(Delta(text))

    async def deltas_sent(self) -> None:
        """Every delta out, in order, before anything else is emitted."""
        if self.sender is not None:
            await asyncio.shield(self.sender)
            self.sender = None

    async def failed(self, exc: LLMError) -> TurnResult:
        self.usage += exc.partial.usage
        if self.partial:
            await self.store(
                EventType.ASSISTANT_RESPONSE,
                {"content": self.partial, "interrupted": True, "reason": exc.kind},
            )
        message = str(exc)
        await self.store(EventType.ERROR, {"content": message, "kind": exc.kind}, closing=True)
        await self.emit(Error(message))
        return TurnResult("error", self.usage, answer=self.partial, error=message)

    async def after_stop(self) -> None:
        self.unsent = ""  # the stopped answer is stored, not streamed further
        await self.deltas_sent()
        if self.pending_approval is not None:
            await sync_to_async(self.pending_approval.expire)()
        if self.partial:
            await self.store(
                EventType.ASSISTANT_RESPONSE,
                {"content": self.partial, "interrupted": True, "reason": "stopped"},
            )
        stopped = {"content": "Stopped by the user.", "kind": "stopped"}
        await self.store(EventType.SYSTEM, stopped, closing=True)

    @cached_property
    def tools(self) -> ToolContext:
        """The tools' context, made at the first call (it makes the workspace)."""
        request = self.request
        return ToolContext.for_session(
            request.owner,
            request.session_id,
            request.agent_name,
            trusted=request.trusted,
            task=request.task,
        )

    async def execute(self, call: ToolCall) -> None:
        await self.emit(Status.running(call.name))
        recorded = await self.store(
            EventType.TOOL_CALL,
            {"id": call.id, "name": call.name, "arguments": call.arguments},
            tool_name=call.name,
        )
        # What the call writes (a fact) links back to it.
        context = replace(self.tools, event_id=recorded.pk, outside_text=self.outside_text)
        output = await call_tool(
            context,
            call.name,
            call.arguments,
            approve=self.approve,
            only={tool.name for tool in self.offered},  # a tool not offered is not run
            extra=self.offered,
        )
        if output.ran and brings_outside_text(call.name):
            self.outside_text = True  # its answer is in the next round's prompt
        self.ran.append(
            Ran(call.name, output.arguments or {}, output.text, output.error, recorded.pk)
        )
        text = output.for_model
        if output.arguments is not None:
            text += await database_sync_to_async(self.learn)(call.name, output.arguments)
        result = {
            "tool_call_id": call.id,
            "name": call.name,
            "content": text,
            "is_error": bool(output.error),
        }
        if call.name in undo.NOTED_TOOLS and output.ran and not output.error and output.arguments:
            # What it changed in memory: the chat's notice, with its Undo (memory.undo).
            noted = await database_sync_to_async(undo.noted)(
                self.request.owner, call.name, recorded, output.arguments
            )
            if noted is not None:
                result["memory"] = noted
                self.noticed.add(recorded.pk)
        await self.store(EventType.TOOL_RESULT, result, tool_name=call.name)

    async def hand_over(self, call: ToolCall) -> None:
        """A call of one of the client's tools: stored (`client`: it waits for the
        client's result, agent.runtime.pending_client_calls), not run."""
        await self.store(
            EventType.TOOL_CALL,
            {"id": call.id, "name": call.name, "arguments": call.arguments, "client": True},
            tool_name=call.name,
        )

    def learn(self, tool: str, arguments: dict[str, Any]) -> str:
        """Record the chain from the previous tool; return a macro hint, if any."""
        if self.previous_tool is not None:
            macros.observe(self.request.owner, self.previous_tool, (tool, arguments))
        self.previous_tool = (tool, arguments)
        note = macros.hint(self.request.owner, tool, arguments)
        return f"\n\n{note}" if note else ""

    async def approve(self, command: str, kind: str = approvals.TERMINAL) -> None:
        """Wait for the user's decision on `command` (an ApprovalRequest.Kind);
        raise ToolError unless allowed."""
        request = await database_sync_to_async(approvals.create_request)(
            self.request.owner, self.request.session_id, command, kind
        )
        self.pending_approval = request
        await self.emit(
            ApprovalAsked(
                request_id=str(request.pk),
                command=command,
                prefix=request.prefix or None,
                always_refused=request.rule.reason if not request.prefix else "",
                kind=kind,
            )
        )
        timeout = self.request.approval_timeout
        if timeout is None:
            timeout = settings.NEOTASK["terminal"]["approval_timeout_seconds"]
        decision = await approvals.wait_for_decision(request, timeout)
        self.pending_approval = None
        if decision == "deny":
            what = "running this command" if kind == approvals.TERMINAL else "this call"
            raise ToolError(f"The user denied {what}.")
        if decision == "timeout":
            message = f"No approval for `{command}` within {timeout:g} s; it was not run."
            await self.emit(Error(message))
            raise ToolError(message)

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
