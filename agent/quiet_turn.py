"""A turn nobody watches and that is kept nowhere: the turn's own loop
(agent.runtime.Turn.loop: rounds of the model and of tool calls), on messages
given, with the tools given, for a few rounds; nothing stored or emitted, the
rounds' exchange kept in memory instead. Compaction's memory flush is one
(sessions_app.compaction.flush_memory): the model, shown the conversation,
saves the facts it holds before it is summarised.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from agent.frames import Frame
from agent.llm import LLMClient, LLMError
from agent.prompt import TurnPrompt
from agent.runtime import Turn, TurnRequest, TurnResult
from agent.tools import Ran, Tool
from memory.models import Event, EventType


async def unheard(frame: Frame) -> None:
    """Nobody watches: the frames go nowhere."""


class QuietTurn(Turn):
    def __init__(
        self,
        request: TurnRequest,
        tools: list[Tool],
        rounds: int,
        client: LLMClient | None = None,
    ) -> None:
        super().__init__(request, unheard, client)
        self.only = tools
        self.max_iterations = rounds
        self.calls.quiet = True
        self.exchange: list[dict[str, Any]] = []

    async def offer(self) -> tuple[list[Tool], list[dict[str, Any]], set[str]]:
        return self.only, [tool.schema() for tool in self.only], set()

    async def round_messages(self, prompt: TurnPrompt) -> list[dict[str, Any]]:
        return list(self.exchange)

    async def store(
        self, event_type: str, data: dict[str, Any], *, closing: bool = False, **fields: Any
    ) -> Event:
        """Not stored: the model's calls and their results join the exchange."""
        if event_type == EventType.ASSISTANT_RESPONSE and data.get("tool_calls"):
            called = {"content": data["content"], "tool_calls": data["tool_calls"]}
            self.exchange.append({"role": "assistant", **called})
        elif event_type == EventType.TOOL_RESULT:
            result = {"tool_call_id": data["tool_call_id"], "content": data["content"]}
            self.exchange.append({"role": "tool", **result})
        return Event(event_type=event_type, data=data)

    async def failed(self, exc: LLMError) -> TurnResult:
        raise exc  # the caller decides what a failure means

    async def rounds(self, messages: list[dict[str, Any]]) -> list[Ran]:
        """The rounds on `messages`; the calls run."""
        request = self.request
        self.exchange = list(messages)
        prompt = TurnPrompt(request.owner, request.session_id, "", timezone.now(), ())
        await self.loop(prompt, list(messages))
        return self.calls.ran
