"""Agents and their sessions (conversations)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Collection
from typing import Any, ClassVar

from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Count, Exists, F, Func, Max, OuterRef, Q, Subquery
from django.utils import timezone

from agent.llm import Usage
from core.ownership import OwnedModel, OwnedQuerySet, Owner
from memory.models import Event, EventType, Fact
from memory.working import working_memory
from memory.workspace import AGENT_NAME, DEFAULT_AGENT
from sessions_app.keys import SCHEDULED_CHANNEL, SessionKey

TITLE_LENGTH = 60  # characters of the first message that name a chat


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

    def to_dict(self) -> dict[str, Any]:
        """The session as the JSON API shows it; the sessions.json index
        (sessions_app.transcripts) and the archive (importers.archive) build on it.
        Every field name is a stable interface."""
        return {
            "id": str(self.pk),
            "key": self.key,
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
