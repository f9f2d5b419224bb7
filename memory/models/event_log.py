"""The conversation log: events, their vocabulary, and the record of forgotten ones."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from django.db import models
from django.db.models import Q
from django.utils import timezone

from core.ownership import OwnedModel
from memory.search_keys import KEY_VERSION, context_for, key_for, speaker_of
from memory.workspace import DEFAULT_AGENT


class EventType(models.TextChoices):
    USER_MESSAGE = "user_message", "User message"
    ASSISTANT_RESPONSE = "assistant_response", "Assistant response"
    TOOL_CALL = "tool_call", "Tool call"
    TOOL_RESULT = "tool_result", "Tool result"
    SYSTEM = "system", "System"
    SESSION_START = "session_start", "Session start"
    SESSION_END = "session_end", "Session end"
    COMPACTION = "compaction", "Compaction"
    SUMMARY = "summary", "Summary"
    RECALL = "recall", "Recalled memories"
    ERROR = "error", "Error"

    # The vocabulary's groups, named once (set below the class: in its body
    # the members are not made yet).
    TURNS: ClassVar[tuple[str, ...]]  # what was said, by the user and the agent
    RECALLABLE: ClassVar[tuple[str, ...]]  # what memory search and recall bring back
    HISTORY: ClassVar[tuple[str, ...]]  # what the model is shown of a session
    CONTENT: ClassVar[tuple[str, ...]]  # all that has content: embedded, kept in working memory

    @classmethod
    def of_role(cls, role: str) -> str | None:
        """The event a chat message of this role is stored as (Event.role
        reversed; an assistant's message is its response)."""
        for kind in (cls.USER_MESSAGE, cls.ASSISTANT_RESPONSE, cls.TOOL_RESULT, cls.SYSTEM):
            if ROLES[kind][0] == role:
                return kind
        return None


EventType.TURNS = (EventType.USER_MESSAGE, EventType.ASSISTANT_RESPONSE)
EventType.RECALLABLE = (*EventType.TURNS, EventType.SUMMARY, EventType.COMPACTION)
EventType.HISTORY = (*EventType.TURNS, EventType.TOOL_RESULT)
EventType.CONTENT = (*EventType.HISTORY, EventType.SUMMARY, EventType.COMPACTION)

# Each event type's role in a chat (the OpenAI protocol's; transcripts carry it
# too) and the name a transcript written for a model gives it.
ROLES: dict[str, tuple[str | None, str]] = {
    EventType.USER_MESSAGE: ("user", "User"),
    EventType.ASSISTANT_RESPONSE: ("assistant", "Assistant"),
    EventType.TOOL_CALL: ("assistant", "Assistant"),
    EventType.TOOL_RESULT: ("tool", "Tool"),
    EventType.SYSTEM: ("system", "System"),
    EventType.SUMMARY: (None, "Earlier summary"),
    EventType.COMPACTION: (None, "Earlier summary"),
}


# How much an event matters to retrieval unless someone says otherwise.
DEFAULT_IMPORTANCE: dict[str, float] = {
    EventType.USER_MESSAGE: 0.5,
    EventType.ASSISTANT_RESPONSE: 0.5,
    EventType.TOOL_CALL: 0.3,
    EventType.TOOL_RESULT: 0.3,
    EventType.SUMMARY: 0.8,
    EventType.COMPACTION: 0.8,
}


class Unknown:
    """What a writer passes when it does not know something the event's row needs
    (`Event.previous_turn_text`): it is then asked of the database."""


UNKNOWN = Unknown()
FALLBACK_IMPORTANCE = 0.1  # system, lifecycle and error events
PINNED_IMPORTANCE = 1.0  # the top of the scale: a pinned event is always recalled
# The bottom of the scale: kept and shown in its chat, found by the forget dialog,
# never recalled (an answer cut off or stopped as a loop: agent.runtime.unrecalled).
# Pinning it makes it a memory again.
UNRECALLED_IMPORTANCE = 0.0
RECALLED = Q(event_type__in=EventType.RECALLABLE, importance__gt=UNRECALLED_IMPORTANCE)


def is_recalled(event: Event) -> bool:
    """What `RECALLED` selects: an event memory search and recall may bring back."""
    return event.event_type in EventType.RECALLABLE and event.importance > UNRECALLED_IMPORTANCE


def transcript(events: list[Event], chars: int) -> str:
    """Events as a transcript for a model to read (to summarise, to take facts
    from): a line each, who said what when; the last `chars` of it."""
    lines = [f"{e.label} ({e.created_at:%Y-%m-%d %H:%M}): {e.text}" for e in events if e.text]
    return "\n".join(lines)[-chars:]


def default_importance(event_type: str) -> float:
    return DEFAULT_IMPORTANCE.get(event_type, FALLBACK_IMPORTANCE)


class Event(OwnedModel):
    """One entry of the conversation log: the canonical record of what happened.

    Memory knows a conversation only by its session id (text), so this app
    stays independent of sessions_app; legacy and imported ids fit as well.
    """

    session_id = models.CharField(max_length=255)
    # Whose memory: retrieval never mixes agents of the same owner.
    agent = models.CharField(max_length=64, default=DEFAULT_AGENT)
    event_type = models.CharField(max_length=32, choices=EventType.choices)
    data = models.JSONField(default=dict, blank=True)
    # The event's searchable words (message content, tool output), kept beside
    # `data` so that full-text search and embedding need no JSON parsing.
    text = models.TextField(blank=True, default="")
    # How memory search finds the event (memory.search_keys): kept apart from what is
    # shown. An empty key means "the text" (rows written before keys existed,
    # bulk imports); `key_version` names the recipe the key and the vector
    # were made with, so that a new recipe re-keys in the background.
    speaker = models.CharField(max_length=100, blank=True, default="")
    search_key = models.TextField(blank=True, default="")
    search_context = models.TextField(blank=True, default="")
    key_version = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    consolidated_at = models.DateTimeField(null=True, blank=True)
    # Set while a consolidation job works on the event, so that two workers
    # never consolidate the same events; a stale claim (a crashed worker) expires.
    consolidation_claim = models.UUIDField(null=True, blank=True)
    consolidation_claimed_at = models.DateTimeField(null=True, blank=True)
    task_id = models.CharField(max_length=64, null=True, blank=True)
    tool_name = models.CharField(max_length=128, null=True, blank=True)
    importance = models.FloatField(default=0.5)
    embedding = models.BinaryField(null=True, blank=True)
    embedding_error = models.TextField(null=True, blank=True)
    embedding_attempts = models.PositiveSmallIntegerField(default=0)
    embedding_retry_at = models.DateTimeField(null=True, blank=True)
    # When the vector was stored: the in-process indexes sync from this.
    embedded_at = models.DateTimeField(null=True, blank=True)
    legacy_message_id = models.CharField(max_length=64, null=True, blank=True)
    # The kind of import that brought the event in ("neotask" for an export archive,
    # "aidaemon", "openclaw"; memory.recording.record_imported sets it), empty for
    # one written here. Its text is outside text: agent.prompt shows it as data and a
    # turn that holds it asks before a lasting change.
    imported_from = models.CharField(max_length=16, blank=True, default="")
    # A summary's sources: the events consolidation condensed into it.
    condensed = models.ManyToManyField(
        "self", symmetrical=False, related_name="summaries", blank=True
    )

    class Meta:
        db_table = "events"
        ordering = ["created_at", "id"]
        indexes = [
            # A session's events, newest first, and the working-memory version
            # check (count and newest id) read from this index alone.
            models.Index(fields=["owner", "session_id", "id"], name="event_session"),
            models.Index(fields=["owner", "created_at"], name="event_owner_time"),
            # get_context's relevance branch: the most important, newest first, read
            # in this index's order and stopped at its limit (no sort of them all).
            models.Index(
                fields=["owner", "agent", "importance", "created_at"], name="event_relevance"
            ),
            models.Index(fields=["owner", "agent", "embedded_at"], name="event_owner_embedded"),
            models.Index(
                fields=["owner", "created_at"],
                condition=Q(consolidated_at__isnull=True),
                name="event_unconsolidated",
            ),
            models.Index(
                fields=["owner", "id"],
                condition=Q(embedding__isnull=True),
                name="event_missing_embedding",
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["session_id", "event_type", "legacy_message_id"],
                condition=Q(legacy_message_id__isnull=False),
                name="event_unique_legacy_message",
            ),
            models.CheckConstraint(
                condition=Q(importance__gte=0.0, importance__lte=1.0),
                name="event_importance_0_to_1",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} #{self.pk}"

    def set_keys(self, previous_text: str | None) -> None:
        """The search fields (memory.search_keys), given the text of the session's turn
        before this one."""
        self.speaker = speaker_of(self.data)
        self.search_key = key_for(self.text, self.speaker)
        self.search_context = context_for(previous_text)
        self.key_version = KEY_VERSION

    def previous_turn_text(self, known: str | Unknown | None = UNKNOWN) -> str | None:
        """The context of this event's key: only what memory search returns needs
        one, so tool calls and lifecycle events cost no query, nor one whose
        writer `known`s it (a turn, which wrote the turn before itself)."""
        if self.event_type not in EventType.RECALLABLE:
            return None
        if not isinstance(known, Unknown):
            return known
        return Event.last_turn_text(self.owner_id, self.session_id, self.pk)

    @classmethod
    def last_turn_text(
        cls, owner_id: int, session_id: str, before_id: int | None = None
    ) -> str | None:
        turns = cls.said_in(owner_id, session_id)
        if before_id is not None:
            turns = turns.filter(pk__lt=before_id)
        return turns.values_list("text", flat=True).first()

    @classmethod
    def said_in(cls, owner_id: Any, session_id: Any) -> models.QuerySet[Event]:
        """The session's turns with text, the last first: what gives a key its context."""
        turns = cls.objects.filter(
            owner_id=owner_id, session_id=session_id, event_type__in=EventType.TURNS
        )
        return turns.exclude(text="").order_by("-id")

    @classmethod
    def set_keys_in_order(cls, events: Sequence[Event]) -> None:
        """Key new events (bulk writers) as `set_keys(previous_turn_text())` keys
        each one written alone, in this order: a session's last stored turn is
        asked once, when its first recallable event needs it, then carried."""
        last_turn: dict[tuple[int, str], str | None] = {}
        for event in events:
            session = (event.owner_id, event.session_id)
            previous = None
            if event.event_type in EventType.RECALLABLE:
                if session not in last_turn:
                    last_turn[session] = cls.last_turn_text(*session)
                previous = last_turn[session]
            event.set_keys(previous)
            if event.event_type in EventType.TURNS and event.text:
                last_turn[session] = event.text

    @property
    def is_pinned(self) -> bool:
        return self.importance >= PINNED_IMPORTANCE

    def toggle_pin(self) -> None:
        """Pin the event, or unpin it back to its type's default importance."""
        self.importance = (
            default_importance(self.event_type) if self.is_pinned else PINNED_IMPORTANCE
        )
        self.save(update_fields=["importance"])

    @property
    def role(self) -> str | None:
        """The event's role in a chat: user, assistant, tool, system, or None."""
        return ROLES.get(self.event_type, (None, ""))[0]

    @property
    def label(self) -> str:
        """Who the event is in a transcript written for a model."""
        return ROLES.get(self.event_type, (None, "Note"))[1]

    @property
    def key_text(self) -> str:
        """What the event's vector is the embedding of."""
        return self.search_key or self.text

    @property
    def has_embedding(self) -> bool:
        return self.embedding is not None

    def as_dict(self) -> dict[str, Any]:
        """The event as the chat protocol and transcripts carry it."""
        return {
            "id": self.pk,
            "session_id": self.session_id,
            "event_type": self.event_type,
            "data": self.data,
            "text": self.text,
            "tool_name": self.tool_name,
            "importance": self.importance,
            "created_at": self.created_at.isoformat(),
        }


class ForgottenEvent(OwnedModel):
    """An event deleted on demand (memory.forgetting): its id stays here so that
    every process's in-process vector index drops its vector at its next sync,
    not only when the vector happens to come up as a hit. Ids and times only:
    nothing of what was said."""

    agent = models.CharField(max_length=64, default=DEFAULT_AGENT)
    event_id = models.BigIntegerField()
    forgotten_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "forgotten_events"
        indexes = [
            # Each index sync reads the recent ones of its owner and agent.
            models.Index(fields=["owner", "agent", "forgotten_at"], name="forgotten_owner_time"),
        ]

    def __str__(self) -> str:
        return f"forgotten event #{self.event_id}"
