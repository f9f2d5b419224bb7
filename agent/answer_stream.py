"""The answer a turn's model is streaming (agent.runtime): its deltas sent as
`Delta` frames, and the stream closed early when the model writes a whole tool
call as text (`CallWritten`) or starts repeating itself (`Repeating`)."""

from __future__ import annotations

import asyncio

from agent.frames import Delta, Emit
from agent.repetition import Loop, RepetitionWatch
from agent.text_tool_calls import call_written_so_far
from agent.tools import Tool

# Streamed frames when the event loop falls behind: a sender that starts this
# many seconds late sends a frame per DELTA_TICK at most (AnswerStream.send_deltas).
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


class AnswerStream:
    def __init__(self, emit: Emit) -> None:
        self.emit = emit
        self.partial = ""  # text streamed since the last stored answer
        self.watch = RepetitionWatch()  # on the answer being streamed
        self.offered: list[Tool] = []  # the tools of the round being answered
        # Deltas not sent yet, the task sending them, when it was asked to and
        # when it last sent a frame (event loop times).
        self.unsent = ""
        self.sender: asyncio.Task | None = None
        self.asked_at = self.sent_at = -DELTA_TICK

    def restart(self, offered: list[Tool]) -> None:
        """A round's answer begins."""
        self.partial = ""
        self.watch = RepetitionWatch()
        self.offered = offered

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

    async def sent(self) -> None:
        """Every delta out, in order, before anything else is emitted."""
        if self.sender is not None:
            await asyncio.shield(self.sender)
            self.sender = None

    async def stopped(self) -> None:
        """/stop: what is unsent stays so (the stopped answer is stored, not streamed further)."""
        self.unsent = ""
        await self.sent()
