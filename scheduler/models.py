from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q

from neotask_site.ownership import OwnedModel
from sessions_app.keys import SessionKey


class ScheduledTask(OwnedModel):
    """A prompt the agent runs on a cron schedule, or once."""

    class Source(models.TextChoices):
        TOOL = "tool", "Created in Neotask"
        CONFIG = "config", "config.toml"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=200)
    cron_expr = models.CharField(max_length=100, help_text="Five cron fields.")
    original_schedule = models.CharField(max_length=500, help_text="What the user typed.")
    prompt = models.TextField()
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.TOOL)
    agent = models.ForeignKey(
        "sessions_app.Agent", null=True, blank=True, on_delete=models.SET_NULL
    )
    time_zone = models.CharField(max_length=64, default="UTC")
    is_oneshot = models.BooleanField(default=False)
    is_paused = models.BooleanField(default=False)
    is_trusted = models.BooleanField(default=False)
    next_run_at = models.DateTimeField()
    last_run_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "scheduled_tasks"
        ordering = ["next_run_at"]
        indexes = [
            models.Index(fields=["next_run_at"], condition=Q(is_paused=False), name="task_due"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def chat_key(self) -> str:
        """The key of the chat its runs answer in."""
        return str(SessionKey.for_task(str(self.pk)))

    @property
    def is_read_only(self) -> bool:
        return self.source == self.Source.CONFIG
