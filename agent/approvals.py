"""Terminal approvals: which commands run without asking, and the user's decisions."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from typing import Any

from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from agent.models import ApprovalRequest, TerminalAllowedPrefix

# Anything that chains, substitutes or redirects: a prefix approved for `ls`
# must never let `ls; rm -rf ~` or `ls $(rm -rf ~)` through.
CONTROL_OPERATORS = re.compile(r"[;&|`<>\n\r]|\$\(")
SUBCOMMAND = re.compile(r"^[a-z][a-z0-9_-]*$")
# Programs whose second word picks what they do: allowing `git status` must
# not allow `git push`.
WITH_SUBCOMMANDS = frozenset(
    {
        *("apt", "apt-get", "brew", "cargo", "docker", "gh", "git", "go", "helm", "kubectl"),
        *("make", "npm", "pip", "pip3", "pnpm", "poetry", "systemctl", "uv", "yarn"),
    }
)
POLL_SECONDS = 0.2
PERMISSION = "agent.use_terminal"


class ApprovalError(Exception):
    """A decision that cannot be applied; the message is for the user."""


def normalize(command: str) -> str:
    return " ".join(command.split())


def has_control_operators(command: str) -> bool:
    return bool(CONTROL_OPERATORS.search(command))


def suggested_prefix(command: str) -> str:
    """What "Allow always" allows: the program, plus its subcommand for tools
    that have them (`git status`, `npm run`), never paths, options or values."""
    words = normalize(command).split(" ")
    if len(words) > 1 and words[0] in WITH_SUBCOMMANDS and SUBCOMMAND.match(words[1]):
        return " ".join(words[:2])
    return words[0]


def is_allowed(owner: Any, command: str) -> bool:
    if has_control_operators(command):
        return False
    text = normalize(command)
    prefixes = TerminalAllowedPrefix.objects.owned_by(owner).values_list("prefix", flat=True)
    return any(text == prefix or text.startswith(prefix + " ") for prefix in prefixes)


def create_request(owner: Any, session_id: str, command: str) -> ApprovalRequest:
    return ApprovalRequest.objects.create(
        owner=owner, session_id=session_id, command=command, prefix=suggested_prefix(command)
    )


def decide(user: Any, request_id: str | uuid.UUID, decision: str) -> ApprovalRequest:
    """Apply the user's click; only the owner, with the permission, once."""
    if decision not in ApprovalRequest.Decision.values:
        raise ApprovalError("decision must be 'once', 'always' or 'deny'")
    try:
        request = ApprovalRequest.objects.owned_by(user).get(pk=request_id)
    except (ApprovalRequest.DoesNotExist, ValidationError, ValueError, TypeError):
        raise ApprovalError("There is no such approval request.") from None
    if not user.has_perm(PERMISSION):
        raise ApprovalError("You do not have permission to approve terminal commands.")
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
        if decision == ApprovalRequest.Decision.ALWAYS and not has_control_operators(
            request.command
        ):
            TerminalAllowedPrefix.objects.get_or_create(owner=request.owner, prefix=request.prefix)
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
