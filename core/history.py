"""Recording changes to a user's facts, memory files, terminal rules and tasks.

Each write path of those (on their models and querysets) calls `record_change`
with the actor it was given, so that every change — by the user, the agent, an
import, a task or the admin — lands in one history (core.models.Change)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models, transaction

from core.models import FORGOTTEN, Change
from core.ownership import Owner

MAX_VALUE_CHARS = 10_000  # a memory file's text is summarised, not copied whole


@dataclass(frozen=True)
class Actor:
    """Who or what makes a change: a kind (Change.Actor) and what names it."""

    kind: str
    label: str = ""

    @classmethod
    def user(cls, user: Owner) -> Actor:
        return cls(Change.Actor.USER, user.get_username())

    @classmethod
    def admin(cls, user: Any) -> Actor:
        return cls(Change.Actor.ADMIN, user.get_username())

    @classmethod
    def agent(cls, agent_name: str) -> Actor:
        return cls(Change.Actor.AGENT, agent_name)

    @classmethod
    def importing(cls, label: str) -> Actor:
        return cls(Change.Actor.IMPORT, label)

    @classmethod
    def task(cls, name: str) -> Actor:
        return cls(Change.Actor.TASK, name)

    @classmethod
    def client(cls, label: str) -> Actor:
        """A program of the user's, with one of their API tokens (/mcp)."""
        return cls(Change.Actor.CLIENT, label)

    @classmethod
    def system(cls, label: str) -> Actor:
        return cls(Change.Actor.SYSTEM, label)


def as_json(value: Any) -> Any:
    """`value` as JSON holds it (dates and UUIDs as text), long text cut."""
    if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
        value = value[:MAX_VALUE_CHARS] + "…"
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder))


def snapshot(instance: models.Model, fields: Iterable[str]) -> dict[str, Any]:
    """The instance's `fields` now, as the history stores them: taken before a
    change and after it, `record_change` keeps what differs."""
    return {name: as_json(getattr(instance, name)) for name in fields}


def record_change(
    owner: Owner | int,
    actor: Actor,
    subject_kind: str,
    subject_id: Any,
    subject_label: str,
    action: str,
    old: dict[str, Any] | None = None,
    new: dict[str, Any] | None = None,
) -> Change | None:
    """Add a change to `owner`'s history. For a change of an existing subject
    only the fields that differ are kept; nothing is recorded if none does."""
    if old is not None and new is not None:
        differing = [name for name in new if old.get(name) != new[name]]
        if not differing:
            return None
        old = {name: old.get(name) for name in differing}
        new = {name: new[name] for name in differing}
    owner_id = owner if isinstance(owner, int) else owner.pk
    return Change.objects.create(
        owner_id=owner_id,
        actor_kind=actor.kind,
        actor_label=actor.label[:200],
        subject_kind=subject_kind,
        subject_id=str(subject_id)[:64],
        subject_label=subject_label[:300],
        action=action,
        old_value=old,
        new_value=new,
    )


class Recorded(models.Model):
    """A model whose changes are kept in its owner's history: save and delete
    through `save_by` and `delete_by`, which name the actor."""

    history_subject: str  # a Change.Subject
    history_fields: tuple[str, ...]  # what a change of the row is told by

    class Meta:
        abstract = True

    def history_label(self) -> str:
        return str(self)

    def history_id(self) -> str:
        return str(self.pk)

    def stored(self) -> dict[str, Any] | None:
        """The row as the database has it (None for a new row): what a change
        is compared with, read before the caller's edits are saved."""
        if self.pk is None:
            return None
        row = type(self)._default_manager.filter(pk=self.pk).values(*self.history_fields).first()
        return None if row is None else {name: as_json(row[name]) for name in self.history_fields}

    def save_by(self, actor: Actor, *, before: dict[str, Any] | None = None, **kwargs: Any) -> None:
        """Save and record it; `before` is the row before the edits (read now if not given)."""
        adding = self._state.adding
        if not adding and before is None:
            before = self.stored()
        with transaction.atomic():
            self.save(**kwargs)
            action = Change.Action.CREATED if adding else Change.Action.CHANGED
            new = snapshot(self, self.history_fields)
            record_change(
                self.owner_id,  # type: ignore[attr-defined]
                actor,
                self.history_subject,
                self.history_id(),
                self.history_label(),
                action,
                None if adding else before or {},
                new,
            )

    def delete_by(self, actor: Actor) -> None:
        # As stored: this instance may be older than the row.
        before = self.stored() or snapshot(self, self.history_fields)
        subject_id, label = self.history_id(), self.history_label()
        with transaction.atomic():
            self.delete()
            record_change(
                self.owner_id,  # type: ignore[attr-defined]
                actor,
                self.history_subject,
                subject_id,
                label,
                Change.Action.DELETED,
                before,
                None,
            )

    def erase_by(self, actor: Actor) -> None:
        """Delete because its owner asked to forget it: recorded as deleted, and
        its values erased from the history as well (memory.forgetting)."""
        subject_id = self.history_id()
        with transaction.atomic():
            self.delete()
            owner_id = self.owner_id  # type: ignore[attr-defined]
            Change.objects.forget_values(owner_id, self.history_subject, subject_id, label=True)
            record_change(
                owner_id, actor, self.history_subject, subject_id, FORGOTTEN, Change.Action.DELETED
            )
