"""Terminal approvals: which commands run without asking, and the user's decisions."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from agent.models import ApprovalRequest, TerminalAllowedPrefix
from agent.rules import NotCovered, covers, parse, rule_for

POLL_SECONDS = 0.2
PERMISSION = "agent.use_terminal"


class ApprovalError(Exception):
    """A decision that cannot be applied; the message is for the user."""


def has_terminal_permission(user: Any) -> bool:
    """Read afresh: the caller's user object may be hours old (a websocket's),
    and its permission cache with it."""
    fresh = get_user_model().objects.filter(pk=user.pk, is_active=True).first()
    return fresh is not None and fresh.has_perm(PERMISSION)


def is_allowed(owner: Any, command: str) -> bool:
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


def create_request(owner: Any, session_id: str, command: str) -> ApprovalRequest:
    return ApprovalRequest.objects.create(
        owner=owner, session_id=session_id, command=command, prefix=rule_for(command).prefix or ""
    )


def decide(user: Any, request_id: str | uuid.UUID, decision: str) -> ApprovalRequest:
    """Apply the user's click; only the owner, with the permission, once."""
    if decision not in ApprovalRequest.Decision.values:
        raise ApprovalError("decision must be 'once', 'always' or 'deny'")
    try:
        request = ApprovalRequest.objects.owned_by(user).get(pk=request_id)
    except (ApprovalRequest.DoesNotExist, ValidationError, ValueError, TypeError):
        raise ApprovalError("There is no such approval request.") from None
    if not has_terminal_permission(user):
        raise ApprovalError("You do not have permission to approve terminal commands.")
    rule = rule_for(request.command)
    if decision == ApprovalRequest.Decision.ALWAYS and rule.prefix is None:
        raise ApprovalError(rule.reason)
    status = (
        ApprovalRequest.Status.DENIED if decision == "deny" else ApprovalRequest.Status.APPROVED
    )
    with transaction.atomic():
        # Conditional update: of two clicks (two tabs), only the first counts.
        changed = ApprovalRequest.objects.filter(
            pk=request.pk, status=ApprovalRequest.Status.PENDING
        ).update(status=status, decision=decision, decided_at=timezone.now())
        if not changed:
            raise ApprovalError("This request was already answered or has expired.")
        if decision == ApprovalRequest.Decision.ALWAYS:
            TerminalAllowedPrefix.objects.update_or_create(
                owner=request.owner,
                prefix=rule.prefix,
                defaults={"active": True, "switched_off_because": ""},
            )
    request.refresh_from_db()
    return request


def expire(request_id: uuid.UUID) -> None:
    ApprovalRequest.objects.filter(pk=request_id, status=ApprovalRequest.Status.PENDING).update(
        status=ApprovalRequest.Status.EXPIRED, decided_at=timezone.now()
    )


def current_decision(request_id: uuid.UUID) -> str | None:
    return (
        ApprovalRequest.objects.filter(pk=request_id)
        .exclude(status=ApprovalRequest.Status.PENDING)
        .values_list("decision", flat=True)
        .first()
    )


async def wait_for_decision(request_id: uuid.UUID, timeout: float) -> str:
    """'once', 'always', 'deny', or 'timeout' (the request then expires).

    Polls the database: the click may arrive in another server process."""
    deadline = time.monotonic() + timeout
    read = sync_to_async(current_decision)
    while time.monotonic() < deadline:
        decision = await read(request_id)
        if decision is not None:
            return decision or "deny"
        await asyncio.sleep(POLL_SECONDS)
    await sync_to_async(expire)(request_id)
    # A click in the last instant wins over the timeout.
    return await read(request_id) or "timeout"
