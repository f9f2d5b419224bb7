"""What a turn emits, collected; approval requests answered as a user would."""

from __future__ import annotations

import asyncio
from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth.models import User

from agent import approvals
from agent.approvals import decide
from agent.frames import Frame


class Frames:
    """Collects what a turn emits; answers approval requests like a user would."""

    def __init__(self, user: User | None = None, decision: str | None = None) -> None:
        self.frames: list[dict[str, Any]] = []
        self.user = user
        self.decision = decision
        self.clicks: list[asyncio.Task] = []

    async def __call__(self, typed: Frame) -> None:
        frame = typed.as_json()
        self.frames.append(frame)
        if frame["type"] == "approval_request" and self.user and self.decision:
            self.clicks.append(asyncio.ensure_future(self.click(frame["request_id"])))

    async def click(self, request_id: str) -> None:
        assert self.user is not None and self.decision is not None
        await sync_to_async(decide)(self.user, request_id, self.decision)
        approvals.wake(request_id)  # as the runner does (sessions_app.runner)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [f for f in self.frames if f["type"] == kind]

    def event_types(self) -> list[str]:
        return [f["event"]["event_type"] for f in self.of("event")]
