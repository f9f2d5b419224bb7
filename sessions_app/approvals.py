"""A person's answer to a terminal approval, clicked in the chat page or sent on its socket."""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync

from agent.approvals import decide
from agent.frames import ApprovalDecided
from sessions_app.broadcast import broadcast


def answer_approval(user: Any, key: str, request_id: str, decision: str) -> None:
    """Apply the decision (agent.approvals.decide: the owner's, with the permission,
    once) and tell every tab of the chat, whose cards then go. Raises ApprovalError."""
    decide(user, request_id, decision)
    async_to_sync(broadcast)(user.pk, key, ApprovalDecided(request_id, decision))
