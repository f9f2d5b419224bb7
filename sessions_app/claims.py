"""A chat's queue of inputs and its claim, in the database.

The claim (`ChatClaim`) is taken by a conditional UPDATE with a random token and
a lease the holder renews; only the holder starts and ends the queue's inputs.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db.models import Q
from django.utils import timezone

from agent.frames import Outcome
from memory import recording
from memory.models import EventType
from sessions_app import chat
from sessions_app.models import ChatClaim, ChatInput, Session

LEASE = timedelta(seconds=20)
LOST = "The server stopped while answering; the text streamed until then is kept."
NEXT, FREE, AGAIN = "next", "free", "again"


def take_claim(owner: Any, key: str, token: str) -> tuple[bool, ChatClaim | None]:
    """(won, the claim as a dead holder left it) — a conditional UPDATE, so of
    two processes that read the same free or expired claim only one wins."""
    now = timezone.now()
    claim, _ = ChatClaim.objects.get_or_create(owner=owner, key=key)
    if claim.token and claim.lease_until is not None and claim.lease_until > now:
        return False, None
    won = (
        ChatClaim.objects.filter(pk=claim.pk, token=claim.token)
        .filter(Q(token="") | Q(lease_until__lt=now))
        .update(token=token, lease_until=now + LEASE, session_id="", partial="")
    )
    return bool(won), (claim if won and claim.token else None)


def renew_claim(owner: Any, key: str, token: str, session_id: str, partial: str) -> bool:
    return bool(
        ChatClaim.objects.filter(owner=owner, key=key, token=token).update(
            lease_until=timezone.now() + LEASE, session_id=session_id, partial=partial
        )
    )


def release_claim(owner: Any, key: str, token: str) -> None:
    ChatClaim.objects.filter(owner=owner, key=key, token=token).update(
        token="", lease_until=None, session_id="", partial=""
    )


def enqueue(
    owner: Any, key: str, fields: dict[str, Any], token: str
) -> tuple[ChatInput, bool, ChatClaim | None]:
    """The input stored, and the chat's claim tried: (input, won, dead claim)."""
    item = ChatInput.objects.create(owner=owner, key=key, **fields)
    return (item, *take_claim(owner, key, token))


def next_input(owner: Any, key: str) -> tuple[ChatInput, Session | chat.ChatError] | None:
    """The oldest queued input, marked running (only the claim's holder calls
    this), and the session it runs in (or why there is none)."""
    queued = ChatInput.objects.filter(owner=owner, key=key, status=ChatInput.Status.QUEUED)
    item = queued.order_by("id").first()
    if item is None:
        return None
    ChatInput.objects.filter(pk=item.pk).update(status=ChatInput.Status.RUNNING)
    try:
        return item, chat.find_chat(owner, key)
    except chat.ChatError as exc:
        return item, exc


def end_input(item: ChatInput, outcome: Outcome, token: str) -> str:
    """After an input ran: NEXT if another waits (the claim is kept), else the
    claim let go, and AGAIN if an input arrived meanwhile, FREE if not."""
    finish_input(item, outcome)
    if has_queued(item.owner_id, item.key):
        return NEXT
    release_claim(item.owner_id, item.key, token)
    return AGAIN if has_queued(item.owner_id, item.key) else FREE


def finish_input(item: ChatInput, outcome: Outcome) -> None:
    """Keep the outcome for whoever waits for it; forget the input otherwise."""
    if item.awaited:
        ChatInput.objects.filter(pk=item.pk).update(
            status=ChatInput.Status.DONE, outcome=outcome.as_json()
        )
    else:
        ChatInput.objects.filter(pk=item.pk).delete()


def bury_turn(owner: Any, key: str, dead: ChatClaim) -> list[ChatInput]:
    """The inputs a crashed holder left running (`dead` is its claim as it
    left it); its streamed text stored as an interrupted answer and the cause
    as an error, in the session it wrote to."""
    running = list(ChatInput.objects.filter(owner=owner, key=key, status=ChatInput.Status.RUNNING))
    if dead.session_id:
        if dead.partial:
            recording.record(
                owner,
                dead.session_id,
                EventType.ASSISTANT_RESPONSE,
                {"content": dead.partial, "interrupted": True, "reason": "server_stopped"},
            )
        if running:
            recording.record(
                owner, dead.session_id, EventType.ERROR, {"content": LOST, "kind": "server_stopped"}
            )
    return running


def is_running(owner: Any, key: str) -> bool:
    return (
        ChatClaim.objects.filter(owner=owner, key=key, lease_until__gt=timezone.now())
        .exclude(token="")
        .exists()
    )


def is_queued(input_id: int) -> bool:
    return ChatInput.objects.filter(pk=input_id, status=ChatInput.Status.QUEUED).exists()


def has_queued(owner: Any, key: str) -> bool:
    return ChatInput.objects.filter(owner=owner, key=key, status=ChatInput.Status.QUEUED).exists()
