"""What the agent learned: facts about its user and tool-call macros."""

from __future__ import annotations

from typing import Any, ClassVar, Self

from django.conf import settings
from django.db import models, transaction
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce

from core.history import Actor, Recorded, snapshot
from core.models import Change
from core.ownership import OwnedModel, OwnedQuerySet, Owner
from memory.models.event_log import Event


class FactQuerySet(OwnedQuerySet):
    def remember(
        self,
        owner: Owner,
        category: str,
        key: str,
        value: str,
        *,
        actor: Actor,
        source: str,
        origin: str,
        origin_event_id: int | None = None,
        origin_session_id: str = "",
        origin_label: str = "",
        unverified: bool = False,
    ) -> tuple[Fact, bool]:
        """Store `value` under category/key (normalised), replacing an older value,
        and record who did it and where the value came from. Returns the fact and
        whether it is new. The one way facts are written by the agent, slash
        commands, consolidation, imports and API clients. `unverified`: the value
        came from outside text or a client, and the prompt says so."""
        category, key = Fact.normalise(category), Fact.normalise(key)
        provenance = {
            "origin": origin,
            "origin_event_id": origin_event_id,
            "origin_session_id": origin_session_id,
            "origin_label": origin_label[:200],
        }
        with transaction.atomic():
            fact = self.select_for_update().filter(owner=owner, category=category, key=key).first()
            created = fact is None
            if fact is None:
                fact = Fact(owner=owner, category=category, key=key)
            elif (fact.value, fact.source, fact.unverified) == (value, source, unverified):
                return fact, False  # said again: it keeps where it first came from
            before = None if created else snapshot(fact, Fact.history_fields)
            fact.value, fact.source, fact.unverified = value, source, unverified
            for name, known in provenance.items():
                setattr(fact, name, known)
            fact.save_by(actor, before=before)
        return fact, created


FactManager = models.Manager.from_queryset(FactQuerySet)


class Fact(Recorded, OwnedModel):
    """Something durable about the user or the world, keyed by category/key,
    with where its value came from (`origin`, and the event or session)."""

    class Source(models.TextChoices):
        AGENT = "agent", "Agent"
        USER = "user", "User"
        CLIENT = "client", "API client"  # a program with the user's token (/mcp)

    class Origin(models.TextChoices):
        TURN = "turn", "a turn of the agent's"
        MESSAGE = "message", "your message"
        IMPORT = "import", "an import"
        CONSOLIDATION = "consolidation", "a summary of a conversation"
        PAGE = "page", "the facts page"
        ADMIN = "admin", "the admin"
        CLIENT = "client", "an API client"  # origin_label names it

    MAX_VALUE = 4000  # longer notes belong in a memory file

    category = models.CharField(max_length=100)
    key = models.CharField(max_length=255)
    value = models.TextField()
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.USER)
    # Empty for facts stored before provenance was kept, where nothing told it.
    origin = models.CharField(max_length=16, choices=Origin.choices, blank=True)
    # The turn (the tool call, or the summary) the value came from; the fact
    # outlives it if it is deleted, its session id kept in origin_session_id.
    origin_event = models.ForeignKey(
        Event, null=True, blank=True, on_delete=models.SET_NULL, related_name="facts_derived"
    )
    origin_session_id = models.CharField(max_length=255, blank=True)
    origin_label = models.CharField(max_length=200, blank=True)  # e.g. the import job
    # Written after outside text entered the turn (a click allowed it) or by an
    # API client: the prompt shows it as unverified data (agent.prompt).
    unverified = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects: ClassVar[FactManager] = FactManager()

    history_subject = Change.Subject.FACT
    history_fields = ("category", "key", "value", "source")

    class Meta:
        db_table = "facts"
        ordering = ["category", "key"]
        constraints = [
            models.UniqueConstraint(fields=["owner", "category", "key"], name="fact_unique_key"),
        ]

    def __str__(self) -> str:
        return f"{self.category}/{self.key}"

    def to_dict(self) -> dict[str, Any]:
        """The fact as the JSON API shows it and (without its id) the archive
        keeps it: the one place its fields are listed."""
        return {
            "id": self.pk,
            "category": self.category,
            "key": self.key,
            "value": self.value,
            "source": self.source,
            # Where its value came from: an event and session (in an archive, its
            # ids), or just a label (an import, the admin).
            "origin": self.origin,
            "origin_event_id": self.origin_event_id,
            "origin_session_id": self.origin_session_id,
            "origin_label": self.origin_label,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }

    @staticmethod
    def normalise(name: str) -> str:
        """Category and key as stored: the agent, the page and consolidation
        must all address the same fact."""
        return name.strip().lower()

    def forget(self, actor: Actor) -> None:
        """Deleted and its values erased from the history: whoever deletes a fact
        (the user, the agent asked to forget it, the admin), it is forgotten."""
        self.erase_by(actor)


class MacroQuerySet(OwnedQuerySet):
    def chain(self, trigger_tool: str, pattern: str | None) -> Self:
        """The chains from this tool use (`pattern`: what of its arguments they depend on)."""
        return self.filter(trigger_tool=trigger_tool, trigger_args_pattern=pattern)

    def observe(
        self,
        owner: Owner,
        trigger_tool: str,
        pattern: str | None,
        next_tool: str,
        next_args: dict[str, Any],
    ) -> None:
        """Count that `next_tool` followed the trigger, and give every chain from the
        trigger its new share of the times."""
        with transaction.atomic():
            macro, _ = self.get_or_create(
                owner=owner,
                trigger_tool=trigger_tool,
                trigger_args_pattern=pattern,
                next_tool=next_tool,
            )
            # In the database: two turns of the owner's may count at once.
            self.filter(pk=macro.pk).update(used_count=F("used_count") + 1, next_args=next_args)
            siblings = list(self.owned_by(owner).chain(trigger_tool, pattern))
            total = sum(sibling.used_count for sibling in siblings)
            for sibling in siblings:
                sibling.confidence = sibling.used_count / total
            self.bulk_update(siblings, ["confidence"])

    def confident(self, trigger_tool: str, pattern: str | None) -> Macro | None:
        """The chain worth a hint ([macros] hint_confidence and min_uses), its owner
        not having turned it off; the likeliest if several are."""
        options = settings.NEOTASK["macros"]
        return (
            self.chain(trigger_tool, pattern)
            .filter(is_disabled=False)
            .filter(confidence__gte=options["hint_confidence"], used_count__gte=options["min_uses"])
            .order_by("-confidence", "-used_count")
            .first()
        )


MacroManager = models.Manager.from_queryset(MacroQuerySet)


class Macro(OwnedModel):
    """A learned tool chain: after `trigger_tool`, `next_tool` usually follows.

    `confidence` is the share of the times the trigger was followed by another
    tool in which that tool was `next_tool`; `used_count` counts how often the
    chain ran."""

    trigger_tool = models.CharField(max_length=128)
    trigger_args_pattern = models.TextField(null=True, blank=True)
    next_tool = models.CharField(max_length=128)
    next_args = models.JSONField(default=dict, blank=True)
    confidence = models.FloatField(default=0.0)
    used_count = models.PositiveIntegerField(default=0)
    # Turned off by its owner: still learned from, never offered as a hint.
    is_disabled = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects: ClassVar[MacroManager] = MacroManager()

    class Meta:
        db_table = "macros"
        ordering = ["-confidence", "trigger_tool"]
        constraints = [
            models.UniqueConstraint(
                "owner",
                "trigger_tool",
                Coalesce("trigger_args_pattern", Value("")),
                "next_tool",
                name="macro_unique_chain",
            ),
            models.CheckConstraint(
                condition=Q(confidence__gte=0.0, confidence__lte=1.0),
                name="macro_confidence_0_to_1",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.trigger_tool} → {self.next_tool}"
