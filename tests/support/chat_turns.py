"""A message's turn in a test, through the product's door: submitted to the
chat's runner (sessions_app.runner) as the chat page, the API and the scheduler
submit theirs — the quota counted, the chat's claim taken, the input queued,
its session found (rolled over if stale) — not by calling the turn directly."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from unittest import mock

from channels.db import database_sync_to_async

from agent.frames import Done, Emit, Frame, Queued, Started
from sessions_app import runner
from sessions_app.models import Session
from tests.support.websocket import ignore


@dataclass
class Submitted:
    """How the input ended, as sessions_app.turns.Ended tells it."""

    status: str
    answer: str
    error: str
    frame: Done  # the `done` frame the runner sent

    def done(self) -> Done:
        return self.frame


async def converse(session: Session, text: str, emit: Emit = ignore) -> Submitted:
    """`text` sent to `session`'s chat through the runner, waited for; `emit` is
    given the frames of its run that the runner sends the chat's tabs (from the
    session changes to the answer; not its queued, started and done frames)."""
    owner = await database_sync_to_async(lambda: session.owner)()
    sent = runner.broadcast
    done: asyncio.Future[Done] = asyncio.get_running_loop().create_future()

    async def broadcast(owner_id: int, key: str, frame: Frame) -> None:
        if (owner_id, key) == (owner.pk, session.key):
            if isinstance(frame, Done) and not done.done():
                done.set_result(frame)
            elif not isinstance(frame, Queued | Started | Done):
                await emit(frame)
        await sent(owner_id, key, frame)

    with mock.patch.object(runner, "broadcast", broadcast):
        outcome = await runner.submit(owner, session.key, text, wait=True)
        frame = await asyncio.wait_for(done, 10)
    assert outcome is not None
    return Submitted(outcome.status, outcome.answer, outcome.error or "", frame)
