"""Terminal approvals: which commands run without asking, and the user's decisions."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid

from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError

from agent.mcp.client import server_of_call
from agent.models import ApprovalError, ApprovalRequest, TerminalAllowedPrefix
from agent.rules import NotCovered, covers, parse
from core.history import Actor
from core.ownership import Owner

PERMISSION = "agent.use_terminal"


def has_terminal_permission(user: Owner) -> bool:
    """Read afresh: the caller's user object may be hours old (a websocket's),
    and its permission cache with it."""
    fresh = get_user_model().objects.filter(pk=user.pk, is_active=True).first()
    return fresh is not None and fresh.has_perm(PERMISSION)


def is_allowed(owner: Owner, command: str) -> bool:
    """Whether an active rule of the owner covers the command, checked against
    the allow-list now, whatever it was when the rule was stored."""
    try:
        parse(command)
    except NotCovered:
        return False
    prefixes = (
        TerminalAllowedPrefix.objects.owned_by(owner)
        .filter(active=True)
        .values_list("prefix", flat=True)
    )
    return any(covers(prefix, command) for prefix in prefixes)


TERMINAL, MCP = ApprovalRequest.Kind.TERMINAL.value, ApprovalRequest.Kind.MCP.value
LASTING = ApprovalRequest.Kind.LASTING.value


def create_request(
    owner: Owner, session_id: str, command: str, kind: str = TERMINAL
) -> ApprovalRequest:
    request = ApprovalRequest(owner=owner, session_id=session_id, command=command, kind=kind)
    request.prefix = request.rule.prefix or ""
    request.save()
    return request


def decide(user: Owner, request_id: str | uuid.UUID, decision: str) -> ApprovalRequest:
    """Apply the user's click: only the owner's request, only with the permission,
    only once (ApprovalRequest.decide)."""
    try:
        request = ApprovalRequest.objects.owned_by(user).get(pk=request_id)
    except (ApprovalRequest.DoesNotExist, ValidationError, ValueError, TypeError):
        raise ApprovalError("There is no such approval request.") from None
    # An MCP tool call or a lasting change needs no terminal: its owner decides.
    if request.kind == TERMINAL and not has_terminal_permission(user):
        raise ApprovalError("You do not have permission to approve terminal commands.")
    # "Allow always" remembers an MCP call for the server offering its tool now.
    always = request.kind == MCP and decision == ApprovalRequest.Decision.ALWAYS
    server = server_of_call(user, request.command) if always else None
    request.decide(decision, Actor.user(user), server)
    return request


# The decisions this process's turns wait for. A click may arrive in any server
# process: the chat's control group carries it to the one running the turn
# (sessions_app.runner), which wakes the waiter here; the database says what was
# decided, and is read again every RECHECK_SECONDS in case the signal was lost.
WAITING: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Event]] = {}
RECHECK_SECONDS = 5.0


def wake(request_id: str) -> None:
    """A decision on `request_id` was stored: its waiter, if in this process,
    reads it now. Safe from any thread."""
    waiting = WAITING.get(str(request_id))
    if waiting is not None:
        loop, event = waiting
        loop.call_soon_threadsafe(event.set)


async def wait_for_decision(request: ApprovalRequest, timeout: float) -> str:
    """'once', 'always', 'deny', or 'timeout' (the request then expires)."""
    deadline = time.monotonic() + timeout
    read = sync_to_async(request.decision_now)
    event = asyncio.Event()
    WAITING[str(request.pk)] = (asyncio.get_running_loop(), event)
    try:
        while (remaining := deadline - time.monotonic()) > 0:
            event.clear()  # before reading: a wake from now on is not missed
            decision = await read()
            if decision is not None:
                return decision or "deny"
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), min(remaining, RECHECK_SECONDS))
    finally:
        del WAITING[str(request.pk)]
    await sync_to_async(request.expire)()
    # A click in the last instant wins over the timeout.
    return await read() or "timeout"
