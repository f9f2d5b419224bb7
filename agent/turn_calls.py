"""A turn's calls of Neotask's own tools (agent.runtime): each stored, run under
the user's approval where it asks for one (agent.approvals), learned from as a
chain (agent.macros), and told in the chat's memory notice (memory.undo) when
it changed memory. A call of an OpenAI-compatible client's tool is not run
here (agent.client_tools)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import cached_property
from typing import Any, Protocol

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.conf import settings

from agent import approvals, macros
from agent.frames import ApprovalAsked, Emit, Error, Status
from agent.llm import ToolCall
from agent.tools import Ran, Tool, ToolContext, ToolError, brings_outside_text, call_tool
from core.ownership import Owner
from memory import undo
from memory.models import Event, EventType

Store = Callable[..., Awaitable[Event]]  # agent.runtime.Turn.store


class Asked(Protocol):
    """What the turn was asked (agent.runtime.TurnRequest) that its calls read."""

    @property
    def owner(self) -> Owner: ...
    @property
    def session_id(self) -> str: ...
    @property
    def agent_name(self) -> str: ...
    @property
    def trusted(self) -> bool: ...
    @property
    def task(self) -> str: ...
    @property
    def approval_timeout(self) -> float | None: ...


class TurnCalls:
    def __init__(self, request: Asked, emit: Emit, store: Store) -> None:
        self.request = request
        self.emit = emit
        self.store = store
        self.offered: list[Tool] = []  # the tools of the round being answered
        # Text from outside the person and the agent entered the turn (a tool's answer,
        # a recalled document): from then on a lasting change asks (call_tool).
        self.outside_text = False
        self.ran: list[Ran] = []  # the calls run, for a turn that ends without words
        self.noticed: set[int] = set()  # of those, the calls a memory notice tells of
        self.previous_tool: macros.ToolUse | None = None
        self.pending_approval: approvals.ApprovalRequest | None = None
        # A turn nobody watches (agent.quiet_turn) leaves no trace: no chain learned,
        # no memory notice.
        self.quiet = False

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
        if output.arguments is not None and not self.quiet:
            text += await database_sync_to_async(self.learn)(call.name, output.arguments)
        result = {
            "tool_call_id": call.id,
            "name": call.name,
            "content": text,
            "is_error": bool(output.error),
        }
        noted_tool = call.name in undo.NOTED_TOOLS and not self.quiet
        if noted_tool and output.ran and not output.error and output.arguments:
            # What it changed in memory: the chat's notice, with its Undo (memory.undo).
            noted = await database_sync_to_async(undo.noted)(
                self.request.owner, call.name, recorded, output.arguments
            )
            if noted is not None:
                result["memory"] = noted
                self.noticed.add(recorded.pk)
        await self.store(EventType.TOOL_RESULT, result, tool_name=call.name)

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

    async def stopped(self) -> None:
        """/stop: an approval still asked for expires."""
        if self.pending_approval is not None:
            await sync_to_async(self.pending_approval.expire)()
