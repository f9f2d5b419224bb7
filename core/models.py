"""The history of changes to what a user's agent knows and may do (issue 26):
who or what changed which fact, memory file, terminal rule or task, when, from
what to what. Written through core.history; never edited afterwards."""

from __future__ import annotations

from typing import Any, ClassVar, NoReturn, Self

from django.db import models
from django.db.models import Q
from django.utils import timezone

from core.ownership import OwnedModel, OwnedQuerySet


class ChangeIsPermanent(Exception):
    """The history is a record: rows are added, never edited or deleted one by one
    (they go with their owner's account)."""


class ChangeQuerySet(OwnedQuerySet):
    def matching(self, subject_kind: str = "", actor_kind: str = "", text: str = "") -> Self:
        """The History page's filters; an empty one matches everything."""
        changes = self
        if subject_kind:
            changes = changes.filter(subject_kind=subject_kind)
        if actor_kind:
            changes = changes.filter(actor_kind=actor_kind)
        if text:
            changes = changes.filter(
                Q(subject_label__icontains=text)
                | Q(actor_label__icontains=text)
                | Q(subject_id__iexact=text)
            )
        return changes

    def forget_values(
        self, owner_id: int, subject_kind: str, subject_id: str, *, label: bool = False
    ) -> int:
        """Erase the values a subject had from its history (the rows stay: who
        changed what, when) — the one edit allowed, for a subject its owner asked
        to forget: otherwise the history would keep what was forgotten. `label`:
        its name goes too (a fact's key says what it was; a file's path stays)."""
        rows = self.filter(owner_id=owner_id, subject_kind=subject_kind, subject_id=subject_id)
        erased = 0
        for change in rows.only("id", "old_value", "new_value"):
            erase: dict[str, Any] = {
                "old_value": forgotten(change.old_value),
                "new_value": forgotten(change.new_value),
            }
            if label:
                erase["subject_label"] = FORGOTTEN
            models.QuerySet.update(rows.filter(pk=change.pk), **erase)
            erased += 1
        return erased

    def update(self, **kwargs: Any) -> NoReturn:
        raise ChangeIsPermanent("the history cannot be edited")

    def delete(self) -> NoReturn:
        raise ChangeIsPermanent("the history cannot be deleted")


ChangeManager = models.Manager.from_queryset(ChangeQuerySet)

FORGOTTEN = "(forgotten)"


def forgotten(value: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if value is None else dict.fromkeys(value, FORGOTTEN)


class Change(OwnedModel):
    class Actor(models.TextChoices):
        USER = "user", "You"
        AGENT = "agent", "Agent"
        IMPORT = "import", "Import"
        ADMIN = "admin", "Admin"
        SYSTEM = "system", "Neotask"
        TASK = "task", "Scheduled task"
        CLIENT = "client", "API client"

    class Subject(models.TextChoices):
        FACT = "fact", "Fact"
        MEMORY_FILE = "memory_file", "Memory file"
        TERMINAL_RULE = "terminal_rule", "Terminal rule"
        MCP_CALL = "mcp_call", "MCP call allowed always"
        TASK = "task", "Task"
        MCP_SERVER = "mcp_server", "MCP server"
        MODEL_PROVIDER = "model_provider", "Model provider"
        API_TOKEN = "api_token", "API token"

    class Action(models.TextChoices):
        CREATED = "created", "created"
        CHANGED = "changed", "changed"
        DELETED = "deleted", "deleted"

    at = models.DateTimeField(default=timezone.now)
    actor_kind = models.CharField(max_length=16, choices=Actor.choices)
    actor_label = models.CharField(max_length=200, blank=True)
    subject_kind = models.CharField(max_length=16, choices=Subject.choices)
    subject_id = models.CharField(max_length=64)
    subject_label = models.CharField(max_length=300)
    action = models.CharField(max_length=16, choices=Action.choices)
    # Only what changed: {field: value}; None when the subject did not exist before / after.
    old_value = models.JSONField(null=True, blank=True)
    new_value = models.JSONField(null=True, blank=True)

    objects: ClassVar[ChangeManager] = ChangeManager()

    class Meta:
        db_table = "history"
        ordering = ["-at", "-id"]
        indexes = [
            models.Index(fields=["owner", "-at"], name="history_owner_time"),
            models.Index(fields=["owner", "subject_kind", "subject_id"], name="history_subject"),
        ]

    def __str__(self) -> str:
        return f"{self.get_subject_kind_display()} {self.subject_label} {self.action}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise ChangeIsPermanent("the history cannot be edited")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise ChangeIsPermanent("the history cannot be deleted")

    @property
    def actor(self) -> str:
        kind = self.get_actor_kind_display()
        return f"{kind} ({self.actor_label})" if self.actor_label else kind


class SignOnLink(OwnedModel):
    """Which provider account signs in to which account here (single sign-on,
    neotask_site.single_sign_on): the ID token's issuer and subject, which the
    provider never reassigns, unlike a username. Made at the account's first
    sign-in; deleting it in the admin lets the next sign-in link again by username."""

    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "single sign-on link"
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="signonlink_subject"),
            # One provider account per account and provider.
            models.UniqueConstraint(fields=["owner", "issuer"], name="signonlink_one_per_owner"),
        ]

    def __str__(self) -> str:
        return f"{self.owner} = {self.subject} at {self.issuer}"
