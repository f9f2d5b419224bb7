from __future__ import annotations

import uuid
from typing import Any

from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from neotask_site.ownership import OwnedModel, OwnedQuerySet
from sessions_app.keys import PART, SessionKey

DEFAULT_AGENT = "main"


class AgentQuerySet(OwnedQuerySet):
    def default_for(self, owner: Any) -> Agent:
        agent, _ = self.get_or_create(owner=owner, name=DEFAULT_AGENT)
        return agent


class Agent(OwnedModel):
    """An assistant persona with its own sessions and memory workspace."""

    name = models.CharField(
        max_length=64,
        validators=[RegexValidator(PART, "Use letters, digits, '.', '_' or '-'.")],
        help_text="Used in session keys, e.g. agent:<name>:web:<chat>.",
    )
    system_prompt = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = AgentQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["owner", "name"], name="agent_unique_name"),
        ]

    def __str__(self) -> str:
        return self.name


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
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    continues_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="continuations"
    )
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cache_read_tokens = models.PositiveBigIntegerField(default=0)
    cache_write_tokens = models.PositiveBigIntegerField(default=0)
    # How many compactions led to this session (carried over from the one it continues).
    compaction_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    last_activity_at = models.DateTimeField(default=timezone.now)

    objects = OwnedQuerySet.as_manager()

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

    @classmethod
    def start(cls, owner: Any, agent: Agent, channel: str, chat: str, **fields: Any) -> Session:
        key = SessionKey(agent=agent.name, channel=channel, chat=chat)
        return cls.objects.create(
            owner=owner, agent=agent, key=str(key), channel=channel, chat=chat, **fields
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens
