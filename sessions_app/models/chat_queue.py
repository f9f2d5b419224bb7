"""A chat's input queue and the claim that runs it, one process at a time."""

from __future__ import annotations

import contextlib
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ClassVar, Protocol

from django.db import connection, models, transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from agent.frames import Outcome
from core.ownership import OwnedModel, OwnedQuerySet, Owner
from memory import recording
from memory.models import EventType
from sessions_app.models.conversations import Session
from sessions_app.models.usage_limits import DailyUsage


class ChatInputQuerySet(OwnedQuerySet):
    def queued(self, owner_id: int, key: str) -> ChatInputQuerySet:
        return self.filter(owner_id=owner_id, key=key, status=ChatInput.Status.QUEUED)

    def unfinished(self, owner_id: int, key: str) -> ChatInputQuerySet:
        """The chat's inputs waiting or running (one of them perhaps a dead holder's)."""
        return self.filter(owner_id=owner_id, key=key).exclude(status=ChatInput.Status.DONE)

    def store(
        self, owner: Owner, key: str, fields: dict[str, Any], counting: Counting | None
    ) -> tuple[ChatInput, ChatClaim | None] | None:
        """PostgreSQL: in one statement, the input counted (`counting`, an upsert
        that changes nothing past a limit: sessions_app.quotas.Admission), the
        chat's free claim taken if no input waits in it, and the input stored,
        running if the claim was taken: it and the claim, or None if the count
        refused it (nothing stored, nothing taken). Mostly a chat is idle, its
        claim's row there: one round trip instead of a transaction of five. Else
        the input waits, queued (the caller tries the claim as SQLite's path does)."""
        item = ChatInput(owner=owner, key=key, **fields)
        token, lease = secrets.token_hex(16), timezone.now() + CLAIM_LEASE
        quote = connection.ops.quote_name
        inputs, claims = (quote(model._meta.db_table) for model in (ChatInput, ChatClaim))
        stored = [f for f in ChatInput._meta.concrete_fields if f.name not in ("id", "status")]
        columns = ", ".join(quote(f.column) for f in stored)
        values = [f.get_db_prep_save(f.pre_save(item, True), connection) for f in stored]
        admitted = f"({counting.sql} RETURNING 1)" if counting else "(SELECT 1)"
        sql = f"""WITH admitted AS {admitted},
taken AS (
  UPDATE {claims} SET token = %s, lease_until = %s
  WHERE owner_id = %s AND key = %s AND token = '' AND EXISTS (SELECT 1 FROM admitted)
    AND NOT EXISTS (SELECT 1 FROM {inputs} WHERE owner_id = %s AND key = %s AND status = %s)
  RETURNING 1
)
INSERT INTO {inputs} ({columns}, status)
SELECT {", ".join(["%s"] * len(values))},
  CASE WHEN EXISTS (SELECT 1 FROM taken) THEN %s ELSE %s END
FROM admitted RETURNING id, status"""
        params = [
            *(counting.params if counting else []),
            *(token, lease, owner.pk, key, owner.pk, key, ChatInput.Status.QUEUED),
            *values,
            ChatInput.Status.RUNNING,
            ChatInput.Status.QUEUED,
        ]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        if row is None:
            return None
        item.pk, item.status = row
        item._state.adding, item._state.db = False, self.db
        if item.status != ChatInput.Status.RUNNING:
            return item, None
        return item, ChatClaim(owner_id=owner.pk, key=key, token=token, lease_until=lease)

    def next_for(self, owner_id: int, key: str) -> ChatInput | None:
        """The chat's oldest queued input, marked running; only the holder of the
        chat's claim calls this, so no other process starts it too."""
        item = self.queued(owner_id, key).order_by("id").first()
        if item is not None:
            ChatInput.objects.filter(pk=item.pk).update(status=ChatInput.Status.RUNNING)
            item.status = ChatInput.Status.RUNNING
        return item


ChatInputManager = models.Manager.from_queryset(ChatInputQuerySet)


class Counting(Protocol):
    """A statement that counts an input (sessions_app.quotas.Admission)."""

    @property
    def sql(self) -> str: ...

    @property
    def params(self) -> list[Any]: ...


class ChatInput(OwnedModel):
    """Something sent to a chat that runs as one turn: a message, or a reset or
    compaction. Kept in order and run one at a time by the holder of the chat's
    claim (sessions_app.runner), whichever process that is."""

    class Kind(models.TextChoices):
        MESSAGE = "message", "Message"
        RESET = "reset", "Reset"  # /new, /reset: text is the message that follows, if any
        COMPACT = "compact", "Compact"
        RETRY = "retry", "Retry"  # retry_of: the failed or stopped answer's event
        # An OpenAI-compatible client's results of the tool calls it was handed (`client`).
        TOOL_RESULTS = "tool_results", "Tool results"

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"

    key = models.CharField(max_length=255)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.MESSAGE)
    text = models.TextField(blank=True)
    command = models.CharField(max_length=16, blank=True)  # as typed: "new" or "reset"
    # Set only by the scheduler for a task a person marked trusted.
    trusted = models.BooleanField(default=False)
    approval_timeout = models.FloatField(null=True, blank=True)
    retry_of = models.BigIntegerField(null=True, blank=True)
    # What an OpenAI-compatible client sent with it: agent.client_tools.ClientTurn.as_json().
    client = models.JSONField(null=True, blank=True)
    # Somebody waits for the outcome (the API, the scheduler): kept until read.
    awaited = models.BooleanField(default=False)
    # The tokens sessions_app.quotas reserved for it on its owner's `DailyUsage`
    # of `reserved_day`, given back when it finishes (`finish`).
    reserved_tokens = models.PositiveIntegerField(default=0)
    reserved_day = models.DateField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    outcome = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects: ClassVar[ChatInputManager] = ChatInputManager()

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["owner", "key", "status"], name="chatinput_queue")]

    def __str__(self) -> str:
        return f"{self.kind} in {self.key} ({self.status})"

    @property
    def shown(self) -> str:
        """The input as the chat shows it while it waits."""
        if self.kind == ChatInput.Kind.MESSAGE:
            return self.text
        if self.kind == ChatInput.Kind.RETRY:
            return f"Retry: {self.text}"
        if self.kind == ChatInput.Kind.TOOL_RESULTS:
            return "Tool results"
        return f"/{self.command} {self.text}".strip()

    def finish(self, outcome: Outcome, *, keep: bool | None = None) -> None:
        """Keep the outcome for whoever waits for it (`keep`, unless said: if it
        is `awaited`); forget the input otherwise. Its token reservation is given
        back either way, once (a dead holder's input is finished by the next
        holder, sessions_app.runner)."""
        mine = ChatInput.objects.filter(pk=self.pk)
        # With nothing reserved (no daily token limit) it is one statement: no
        # transaction to pay for on every turn.
        day = self.reserved_day
        with transaction.atomic() if day is not None else contextlib.nullcontext():
            if day is not None and mine.filter(reserved_tokens__gt=0).update(reserved_tokens=0):
                DailyUsage.objects.release(self.owner_id, day, self.reserved_tokens)
            if self.awaited if keep is None else keep:
                mine.update(status=ChatInput.Status.DONE, outcome=outcome.as_json())
            else:  # an instance's delete is one statement, a queryset's a transaction too
                ChatInput(pk=self.pk).delete()


@dataclass(frozen=True)
class Abandoned:
    """What a holder that died left in its claim: where its turn wrote, and the
    answer it had streamed so far."""

    session_id: str
    partial: str


class ChatClaimQuerySet(OwnedQuerySet):
    def take(self, owner_id: int, key: str, *, idle: bool = False) -> ChatClaim | None:
        """The chat's claim, taken with a new token; None while another process
        holds it. A conditional UPDATE: of two processes that read the same free
        or expired claim, only one wins. `claim.abandoned` is what a dead holder
        left, if one did. `idle`: a free claim only if no input waits in the chat
        (one whose sender is about to run it: it goes first)."""
        now = timezone.now()
        token = secrets.token_hex(16)
        free = Q(token="")
        if idle:
            waiting = ChatInput.objects.filter(
                owner_id=OuterRef("owner_id"), key=OuterRef("key"), status=ChatInput.Status.QUEUED
            )
            free &= Q(~Exists(waiting))
        # Mostly the claim is free: taken in one statement, with nothing to bury.
        lease = {"token": token, "lease_until": now + CLAIM_LEASE}
        if self.filter(free, owner_id=owner_id, key=key).update(**lease):
            return ChatClaim(owner_id=owner_id, key=key, **lease)
        claim, _ = self.get_or_create(owner_id=owner_id, key=key)
        if claim.token and claim.lease_until is not None and claim.lease_until > now:
            return None
        won = (
            self.filter(pk=claim.pk, token=claim.token)
            .filter(free | Q(lease_until__lt=now))
            .update(token=token, lease_until=now + CLAIM_LEASE, session_id="", partial="")
        )
        if not won:
            return None
        if claim.token:  # expired: its holder died
            claim.abandoned = Abandoned(claim.session_id, claim.partial)
        claim.token, claim.lease_until, claim.session_id, claim.partial = (
            token,
            now + CLAIM_LEASE,
            "",
            "",
        )
        return claim

    def is_held(self, owner_id: int, key: str) -> bool:
        return (
            self.filter(owner_id=owner_id, key=key, lease_until__gt=timezone.now())
            .exclude(token="")
            .exists()
        )


ChatClaimManager = models.Manager.from_queryset(ChatClaimQuerySet)

CLAIM_LEASE = timedelta(seconds=20)
LOST = "The server stopped while answering; the text streamed until then is kept."


class ChatClaim(OwnedModel):
    """Who runs a chat's inputs: taken by a conditional UPDATE with a random
    token and a lease that the running turn renews, so a crashed process's
    claim expires. With the lease, the answer streamed so far is saved, so that
    the next holder can keep it if the process died."""

    key = models.CharField(max_length=255)
    token = models.CharField(max_length=32, blank=True)  # "" when nobody holds it
    lease_until = models.DateTimeField(null=True, blank=True)
    session_id = models.CharField(max_length=64, blank=True)  # where the running turn writes
    partial = models.TextField(blank=True)

    objects: ClassVar[ChatClaimManager] = ChatClaimManager()
    abandoned: Abandoned | None = None  # set by `take` when it took over from a dead holder

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["owner", "key"], name="chatclaim_one_per_chat"),
        ]

    def __str__(self) -> str:
        return f"{self.key}: {'held' if self.token else 'free'}"

    def mine(self) -> ChatClaimQuerySet:
        """The claim while this process still holds it (its token unchanged)."""
        return ChatClaim.objects.filter(owner_id=self.owner_id, key=self.key, token=self.token)

    def renew(self, session_id: str, partial: str) -> bool:
        """Extend the lease, saving where the turn writes and what it streamed;
        False if another process took the claim (this one stalled past its lease)."""
        return bool(
            self.mine().update(
                lease_until=timezone.now() + CLAIM_LEASE, session_id=session_id, partial=partial
            )
        )

    def release(self, *, unless_queued: bool = False) -> bool:
        """Let the claim go; with `unless_queued`, only if no input waits (in the
        same statement, so none is left behind without a holder). Whether it did."""
        claim = self.mine()
        if unless_queued:
            queued = ChatInput.objects.filter(
                owner_id=OuterRef("owner_id"), key=OuterRef("key"), status=ChatInput.Status.QUEUED
            )
            claim = claim.exclude(Exists(queued))
        return bool(claim.update(token="", lease_until=None, session_id="", partial=""))

    def hand_on(self) -> ChatInput | None:
        """After an input ran: the next one, started, keeping the claim; None once
        the claim is let go with nothing waiting."""
        # Let go first: mostly nothing waits, and that is one statement, not two.
        while not self.release(unless_queued=True):
            if (item := ChatInput.objects.next_for(self.owner_id, self.key)) is not None:
                return item
            if not self.mine().exists():  # another process took it (this one stalled)
                return None
        return None

    def bury(self) -> list[ChatInput]:
        """End what the dead holder left (`abandoned`): its streamed text stored as
        an interrupted answer and the cause as an error, in the session it wrote
        to; the inputs it left running, to finish."""
        abandoned, self.abandoned = self.abandoned, None
        if abandoned is None:
            return []
        running = list(
            ChatInput.objects.filter(
                owner_id=self.owner_id, key=self.key, status=ChatInput.Status.RUNNING
            )
        )
        # It died before its first renewal said where it writes: the chat's session.
        active = Session.objects.filter(
            owner_id=self.owner_id, key=self.key, status=Session.Status.ACTIVE
        )
        session_id = abandoned.session_id or str(active.values_list("pk", flat=True).first() or "")
        if session_id:
            if abandoned.partial:
                recording.record(
                    self.owner,
                    session_id,
                    EventType.ASSISTANT_RESPONSE,
                    {"content": abandoned.partial, "interrupted": True, "reason": "server_stopped"},
                )
            if running:
                recording.record(
                    self.owner,
                    session_id,
                    EventType.ERROR,
                    {"content": LOST, "kind": "server_stopped"},
                )
        return running
