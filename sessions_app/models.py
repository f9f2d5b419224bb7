from __future__ import annotations

import contextlib
import hashlib
import hmac
import secrets
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any, ClassVar, Protocol

from django.contrib.auth.models import Group
from django.core.validators import RegexValidator
from django.db import DatabaseError, connection, models, transaction
from django.db.models import Case, Count, Exists, F, Func, Max, OuterRef, Q, Subquery, When
from django.utils import timezone

from agent.frames import Outcome
from agent.llm import Usage
from core.history import Actor, Recorded
from core.models import Change
from core.ownership import OwnedModel, OwnedQuerySet, Owner
from memory import recording
from memory.models import Event, EventType, Fact
from memory.working import working_memory
from memory.workspace import AGENT_NAME, DEFAULT_AGENT
from sessions_app.keys import SCHEDULED_CHANNEL, SessionKey

TITLE_LENGTH = 60  # characters of the first message that name a chat
TOKEN_SCHEME = "nt"
# last_used_at is a hint for the user, not an audit log: one write a minute at most.
TOKEN_TOUCH_INTERVAL = timedelta(minutes=1)


class AgentQuerySet(OwnedQuerySet):
    def default_for(self, owner: Owner) -> Agent:
        agent, _ = self.get_or_create(owner=owner, name=DEFAULT_AGENT)
        return agent


AgentManager = models.Manager.from_queryset(AgentQuerySet)


class Agent(OwnedModel):
    """An assistant persona with its own sessions and memory workspace."""

    name = models.CharField(
        max_length=64,
        # As in migration 0001; forms check first with validate_agent_name, which says the
        # whole rule (this message omits the first character's) and refuses a final newline.
        validators=[RegexValidator(AGENT_NAME, "Use letters, digits, '.', '_' or '-'.")],
        help_text="Used in session keys, e.g. agent:<name>:web:<chat>.",
    )
    system_prompt = models.TextField(blank=True)
    # A model choice (agent.providers); empty: the site's default.
    model = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects: ClassVar[AgentManager] = AgentManager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["owner", "name"], name="agent_unique_name"),
        ]

    def __str__(self) -> str:
        return self.name


class SessionQuerySet(OwnedQuerySet):
    def titles(self, owner_id: int, session_ids: Collection[str]) -> dict[str, str]:
        """The names of the owner's chats among `session_ids` (any text: memory
        keeps ids of every kind), by session id."""
        valid = []
        for session_id in session_ids:
            with contextlib.suppress(ValueError):
                valid.append(uuid.UUID(session_id))
        sessions = self.filter(owner_id=owner_id, pk__in=valid).only("pk", "title", "key")
        return {str(session.pk): str(session) for session in sessions}

    def active(self, owner: Owner, key: str, *, said: bool = False) -> Session | None:
        """`owner`'s active session of the chat `key` (there is one at most); with
        `said`, in the same statement, what a message arriving in it needs of its
        events: the last turn's text (`said_last`), whether one was a message
        (`messaged`) and working memory's marker (`content_count`, `content_newest`);
        and the version of the owner's facts (`facts_count`, `facts_changed`)."""
        sessions = (
            self.owned_by(owner)
            .filter(key=key, status=Session.Status.ACTIVE)
            .select_related("agent", "owner")
        )
        if said:
            session_id = EventSessionId(OuterRef("pk"))
            turns = Event.said_in(OuterRef("owner_id"), session_id)
            messages = Event.objects.filter(
                owner_id=OuterRef("owner_id"),
                session_id=session_id,
                event_type=EventType.USER_MESSAGE,
            )
            count, newest = working_memory.marker_of(OuterRef("owner_id"), session_id)
            facts = Fact.objects.filter(owner_id=OuterRef("owner_id")).order_by().values("owner_id")
            sessions = sessions.annotate(
                said_last=Subquery(turns.values("text")[:1]),
                messaged=Exists(messages),
                content_count=count,
                content_newest=newest,
                facts_count=Subquery(facts.annotate(n=Count("id")).values("n")),
                facts_changed=Subquery(facts.annotate(last=Max("updated_at")).values("last")),
            )
        return sessions.first()


SessionManager = models.Manager.from_queryset(SessionQuerySet)


class EventSessionId(Func):
    """A session's id as its events name it, str(uuid): SQLite keeps a UUIDField
    as its 32 hex digits, PostgreSQL as a uuid."""

    template = "CAST(%(expressions)s AS text)"
    output_field = models.CharField()

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list[Any]]:
        parts = [f"substr(%(expressions)s, {start}, {length})" for start, length in UUID_PARTS]
        template = " || '-' || ".join(parts)
        sql, params = super().as_sql(compiler, connection, template=template, **extra)
        return sql, [*params] * len(parts)


UUID_PARTS = [(1, 8), (9, 4), (13, 4), (17, 4), (21, 12)]  # 8-4-4-4-12 hex digits


class Session(OwnedModel):
    """One conversation. A key may have many sessions over time (resets,
    compactions) but only one active at once; each continues the previous."""

    class Status(models.TextChoices):
        ACTIVE = "active", "Active"
        ARCHIVED = "archived", "Archived"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    key = models.CharField(max_length=255)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="sessions")
    channel = models.CharField(max_length=64)
    chat = models.CharField(max_length=64)
    title = models.CharField(max_length=200, blank=True)
    # The chat's model choice (agent.providers); empty: its agent's default.
    model = models.CharField(max_length=300, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    continues_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="continuations"
    )
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cache_read_tokens = models.PositiveBigIntegerField(default=0)
    cache_write_tokens = models.PositiveBigIntegerField(default=0)
    TOKEN_FIELDS: ClassVar[list[str]] = [
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
    ]
    # How many compactions led to this session (carried over from the one it continues).
    compaction_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    last_activity_at = models.DateTimeField(default=timezone.now)

    objects: ClassVar[SessionManager] = SessionManager()

    class Meta:
        ordering = ["-last_activity_at"]
        indexes = [
            models.Index(fields=["owner", "-last_activity_at"], name="session_owner_activity"),
            models.Index(fields=["owner", "key"], name="session_owner_key"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "key"],
                condition=Q(status="active"),
                name="session_one_active_per_key",
            ),
        ]

    def __str__(self) -> str:
        return self.title or self.key

    @staticmethod
    def title_from(text: str) -> str:
        """A chat's title: its first message, on one line, cut short."""
        title = " ".join(text.split())
        return title[:TITLE_LENGTH] + ("…" if len(title) > TITLE_LENGTH else "")

    @classmethod
    def start(cls, owner: Owner, agent: Agent, channel: str, chat: str, **fields: Any) -> Session:
        key = SessionKey(agent=agent.name, channel=channel, chat=chat)
        return cls.objects.create(
            owner=owner, agent=agent, key=str(key), channel=channel, chat=chat, **fields
        )

    def archive(self) -> bool:
        """Archive the session if it is still active; False if someone else
        (another tab, another worker) did first."""
        return bool(
            Session.objects.filter(pk=self.pk, status=Session.Status.ACTIVE).update(
                status=Session.Status.ARCHIVED, updated_at=timezone.now()
            )
        )

    def continue_as(self, **fields: Any) -> Session | None:
        """Archive the session and continue its chat in a fresh one (same key,
        agent and title, unless `fields` say otherwise); None if it was no
        longer active. Call it in the transaction that also writes the event
        opening the new session, so that neither is kept without the other."""
        if not self.archive():
            return None
        return Session.objects.create(
            **{
                "owner": self.owner,
                "agent": self.agent,
                "key": self.key,
                "channel": self.channel,
                "chat": self.chat,
                "title": self.title,
                "model": self.model,
                "continues_from": self,
                **fields,
            }
        )

    def events(self) -> models.QuerySet[Event]:
        """The session's events (its owner's, as every event of it is)."""
        return Event.objects.filter(owner_id=self.owner_id, session_id=str(self.pk))

    @property
    def is_scheduled(self) -> bool:
        """The runs of a scheduled task (key cron:<task id>), not a conversation."""
        return self.channel == SCHEDULED_CHANNEL

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def usage(self) -> Usage:
        """The session's token counters, as the model reports them."""
        return Usage(
            self.input_tokens, self.output_tokens, self.cache_read_tokens, self.cache_write_tokens
        )

    def as_dict(self) -> dict[str, Any]:
        """What the API and the sessions.json index both say of a session (each
        adds its own id key and extras; their field names are stable interfaces)."""
        return {
            "title": self.title,
            "status": self.status,
            "agent": self.agent.name,
            "tokens": self.usage.as_dict(),
            "compaction_count": self.compaction_count,
            "continues_from": str(self.continues_from_id) if self.continues_from_id else None,
            "created_at": self.created_at.isoformat(),
            "last_activity_at": self.last_activity_at.isoformat(),
        }

    @staticmethod
    def adding(usage: Usage) -> dict[str, Any]:
        """The update that adds `usage` to the counters, in the database (no lost
        update when two processes add at once)."""
        return {
            "input_tokens": F("input_tokens") + usage.input,
            "output_tokens": F("output_tokens") + usage.output,
            "cache_read_tokens": F("cache_read_tokens") + usage.cache_read,
            "cache_write_tokens": F("cache_write_tokens") + usage.cache_write,
        }

    def add_usage(self, usage: Usage) -> None:
        """After a turn: add `usage` to the counters, in the database and in this
        instance (which then holds them as they are, unless another process added
        to them too), and mark the chat active now, in the same statement."""
        now = timezone.now()
        Session.objects.filter(pk=self.pk).update(
            **Session.adding(usage), last_activity_at=now, updated_at=now
        )
        self.last_activity_at = self.updated_at = now
        self.input_tokens += usage.input
        self.output_tokens += usage.output
        self.cache_read_tokens += usage.cache_read
        self.cache_write_tokens += usage.cache_write

    def note_message(self, text: str) -> None:
        """A message arrived: the chat is named by its first message. (It is marked
        active when its turn adds its usage, `add_usage`: one statement, not two.)"""
        if not self.title:
            # Only if still untitled: the user may have renamed the chat since this
            # instance was read (and a rename is what they chose).
            title = Session.title_from(text)
            if Session.objects.filter(pk=self.pk, title="").update(title=title):
                self.title = title
            else:
                self.title = Session.objects.values_list("title", flat=True).get(pk=self.pk)


def hash_secret(secret: str) -> str:
    # Secrets are 256 random bits, so a fast hash is enough (no brute force to slow down).
    return hashlib.sha256(secret.encode()).hexdigest()


class Api(models.TextChoices):
    """The programs' APIs a token may be good for."""

    JSON = "api", "/api/v1"
    OPENAI = "v1", "/v1"
    MCP = "mcp", "/mcp"


def every_api() -> list[str]:
    """A token's APIs unless it names fewer (and those of every token made before
    tokens had a scope)."""
    return [api.value for api in Api]


class ApiToken(Recorded, OwnedModel):
    """A personal token for the programs' APIs, `nt_<prefix>_<secret>`: good for
    the APIs it names, until it expires (if it does) or is revoked. Only the
    secret's hash is stored: the whole token is shown once, at creation. Its
    creation and revocation go to its owner's history."""

    name = models.CharField(max_length=100, help_text="What the token is for, e.g. a script.")
    # Public: shown in the UI and used to find the row; the secret decides.
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    secret_hash = models.CharField(max_length=64, editable=False)
    apis = models.JSONField(default=every_api, help_text="The APIs it is good for (Api values).")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty: it never expires.")
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)

    history_subject = Change.Subject.API_TOKEN
    history_fields = ("name", "prefix", "revoked_at")

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.masked})"

    @property
    def masked(self) -> str:
        """How the UI shows the token: enough to recognise it, not to use it."""
        return f"{TOKEN_SCHEME}_{self.prefix}_…"

    @classmethod
    def issue(
        cls,
        owner: Owner,
        name: str,
        apis: Collection[str] = (),
        lifetime: timedelta | None = None,
        actor: Actor | None = None,
    ) -> tuple[ApiToken, str]:
        """A new token and its full text, which is never available again: good
        for `apis` (every API if none is named) for `lifetime` (or until revoked)."""
        prefix, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
        token = cls(
            owner=owner,
            name=name,
            prefix=prefix,
            secret_hash=hash_secret(secret),
            apis=[api.value for api in Api if api.value in apis] if apis else every_api(),
            expires_at=timezone.now() + lifetime if lifetime else None,
        )
        token.save_by(actor or Actor.user(owner))
        return token, f"{TOKEN_SCHEME}_{prefix}_{secret}"

    @classmethod
    def authenticate(cls, presented: str, api: str) -> ApiToken | None:
        """The live token `presented` is, with its owner, if it is good for `api`;
        None if it is malformed, unknown, wrong, revoked, expired or for other
        APIs, or its owner is inactive."""
        scheme, _, rest = presented.partition("_")
        prefix, _, secret = rest.partition("_")
        if scheme != TOKEN_SCHEME or not prefix or not secret or "\x00" in presented:
            return None  # (PostgreSQL refuses NUL in a query)
        # Not owner-scoped: nobody is known yet, finding out who is the point.
        token = (
            cls.objects.select_related("owner")
            .filter(prefix=prefix, revoked_at__isnull=True)
            .first()
        )
        if token is None or not hmac.compare_digest(token.secret_hash, hash_secret(secret)):
            return None
        if not token.owner.is_active or token.is_expired or api not in token.apis:
            return None
        token.touch()
        return token

    def touch(self) -> None:
        now = timezone.now()
        if self.last_used_at is None or now - self.last_used_at >= TOKEN_TOUCH_INTERVAL:
            # A hint: a database that cannot write (a full disk) still lets the token read.
            with contextlib.suppress(DatabaseError), transaction.atomic():
                ApiToken.objects.filter(pk=self.pk).update(last_used_at=now)
                self.last_used_at = now

    def revoke(self, actor: Actor | None = None) -> None:
        """By `actor` (its owner, unless said)."""
        if self.revoked_at is None:
            before = self.stored()
            self.revoked_at = timezone.now()
            actor = actor or Actor.user(self.owner)
            self.save_by(actor, before=before, update_fields=["revoked_at"])

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None

    @property
    def is_expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

    @property
    def api_labels(self) -> list[str]:
        return [api.label for api in Api if api.value in self.apis]


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


class GroupQuota(models.Model):
    """Limits for the members of a Django group, instead of the [quotas] defaults
    (sessions_app.quotas: the most generous of a user's groups wins)."""

    group = models.OneToOneField(Group, on_delete=models.CASCADE, related_name="quota")
    messages_per_minute = models.PositiveIntegerField(
        default=0, help_text="Messages a member may send in a minute; 0 = no limit."
    )
    tokens_per_day = models.PositiveBigIntegerField(
        default=0,
        help_text="Model tokens (prompt and answer) a member may use a day; 0 = no limit.",
    )

    def __str__(self) -> str:
        return f"Quota of {self.group}"


class DailyUsageQuerySet(OwnedQuerySet):
    def release(self, owner_id: int, day: date, tokens: int) -> None:
        """Give back `tokens` an input reserved on `day` (never below 0: an admin
        may have deleted the row meanwhile)."""
        self.filter(owner_id=owner_id, day=day).update(
            reserved=Case(When(reserved__gt=tokens, then=F("reserved") - tokens), default=0)
        )


DailyUsageManager = models.Manager.from_queryset(DailyUsageQuerySet)


class DailyUsage(OwnedModel):
    """What a user's inputs cost on one day (the site's time zone): messages and
    model tokens, the tokens reserved by the inputs still running, and the
    current minute's messages (window_start, window_messages), all kept by
    sessions_app.quotas in single statements."""

    day = models.DateField()
    messages = models.PositiveIntegerField(default=0)
    tokens = models.PositiveBigIntegerField(default=0)
    # Admitted inputs not yet finished hold a reservation each (sessions_app.quotas).
    reserved = models.PositiveBigIntegerField(default=0)
    # The per-minute limit's window: it opens with the first message after the
    # last one closed, and counts the messages sent in it.
    window_start = models.DateTimeField(null=True, blank=True)
    window_messages = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    objects: ClassVar[DailyUsageManager] = DailyUsageManager()

    class Meta:
        ordering = ["-day", "owner_id"]
        verbose_name = "usage by day"
        verbose_name_plural = "usage by day"
        constraints = [
            models.UniqueConstraint(fields=["owner", "day"], name="dailyusage_owner_day"),
        ]

    def __str__(self) -> str:
        return f"{self.owner} on {self.day}"
