"""Quota limits by group and usage by day (sessions_app.quotas keeps them)."""

from __future__ import annotations

from datetime import date
from typing import ClassVar

from django.contrib.auth.models import Group
from django.db import models
from django.db.models import Case, F, When

from core.ownership import OwnedModel, OwnedQuerySet


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
