from __future__ import annotations

import uuid
from datetime import datetime
from typing import ClassVar

from django.db import models
from django.db.models import Q
from django.utils import timezone

from core.history import Actor, Recorded
from core.models import Change
from core.ownership import OwnedModel, OwnedQuerySet, Owner
from scheduler.planning import Plan, TaskError, check_name, check_prompt, default_name, plan
from scheduler.schedule import ScheduleError, next_run
from sessions_app.keys import SessionKey
from sessions_app.models import Agent


def checked_plan(schedule: str, now: datetime | None) -> Plan:
    try:
        return plan(schedule, now=now)
    except ScheduleError as exc:
        raise TaskError(str(exc)) from None


class ScheduledTaskQuerySet(OwnedQuerySet):
    def create_task(
        self,
        owner: Owner,
        schedule: str,
        prompt: str,
        name: str = "",
        *,
        actor: Actor,
        agent: Agent | None = None,
        now: datetime | None = None,
    ) -> tuple[ScheduledTask, Plan]:
        """A task created in Neotask (source "tool"), untrusted: trust is granted
        only in the admin or config.toml. Nothing is saved if any part is bad."""
        prompt = check_prompt(prompt)
        name = check_name(name or default_name(prompt))
        planned = checked_plan(schedule, now)
        if self.owned_by(owner).filter(name=name).exists():
            raise TaskError(
                f'You already have a task named "{name}". Pick another name, or cancel that '
                "task first."
            )
        task = ScheduledTask(
            owner=owner,
            name=name,
            cron_expr=planned.cron_expr,
            original_schedule=planned.original,
            prompt=prompt,
            source=ScheduledTask.Source.TOOL,
            agent=agent or Agent.objects.default_for(owner),
            time_zone=planned.time_zone,
            is_oneshot=planned.is_oneshot,
            next_run_at=planned.runs[0],
        )
        task.save_by(actor)
        return task, planned

    def find(self, reference: str) -> ScheduledTask:
        """The task with this id or exact name (scope it first with `owned_by`);
        TaskError if none or several."""
        reference = reference.strip()
        try:
            by_id = self.filter(pk=uuid.UUID(reference)).first()
        except ValueError:
            by_id = None
        if by_id is not None:
            return by_id
        named = list(self.filter(name=reference)[:2])
        if not named:
            raise TaskError(f'You have no scheduled task "{reference}". List them with list_tasks.')
        if len(named) > 1:
            raise TaskError(f'Several of your tasks are named "{reference}"; use the task id.')
        return named[0]


ScheduledTaskManager = models.Manager.from_queryset(ScheduledTaskQuerySet)


class ScheduledTask(Recorded, OwnedModel):
    """A prompt the agent runs on a cron schedule, or once.

    Its owner changes it through `edit`, `pause`, `resume` and `cancel`, which
    refuse a task of config.toml (that file is its truth). `is_trusted` lets its
    terminal commands run unasked, so only a person holding the terminal
    permission sets it: in the admin (see `trust_fields`) or in config.toml.
    """

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

    objects: ClassVar[ScheduledTaskManager] = ScheduledTaskManager()

    history_subject = Change.Subject.TASK
    history_fields = (
        "name",
        "original_schedule",
        "cron_expr",
        "time_zone",
        "prompt",
        "agent_id",
        "is_oneshot",
        "is_paused",
        "is_trusted",
    )

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

    def trust_fields(self) -> list[str]:
        """What only a holder of the terminal permission may change: the trust
        itself and, once trusted, the prompt and agent that run unattended."""
        return ["is_trusted", "prompt", "agent"] if self.is_trusted else ["is_trusted"]

    def check_editable(self) -> None:
        """TaskError unless its owner may change it in Neotask."""
        if self.is_read_only:
            raise TaskError(
                f'"{self.name}" comes from config.toml ([[scheduled_tasks]]); change or remove '
                "it there, then restart Neotask."
            )

    def edit(
        self, schedule: str, prompt: str, *, actor: Actor, now: datetime | None = None
    ) -> Plan:
        """A new schedule and prompt, checked as create_task checks them; the next
        run follows the new schedule."""
        self.check_editable()
        prompt = check_prompt(prompt)
        planned = checked_plan(schedule, now)
        self.cron_expr, self.original_schedule = planned.cron_expr, planned.original
        self.time_zone, self.is_oneshot = planned.time_zone, planned.is_oneshot
        self.prompt, self.next_run_at = prompt, planned.runs[0]
        self.save_by(actor)
        return planned

    def pause(self, *, actor: Actor) -> None:
        self.check_editable()
        self.is_paused = True
        self.save_by(actor, update_fields=["is_paused", "updated_at"])

    def resume(self, *, actor: Actor, now: datetime | None = None) -> None:
        self.check_editable()
        fields = ["is_paused", "updated_at"]
        if self.is_paused and not self.is_oneshot:
            # From now on: resuming must not fire at once for the runs missed while
            # paused. A one-shot whose time passed runs once, as it would after downtime.
            try:
                self.next_run_at = next_run(self.cron_expr, now or timezone.now(), self.time_zone)
            except ScheduleError as exc:
                raise TaskError(f'"{self.name}" cannot run again: {exc}') from None
            fields.append("next_run_at")
        self.is_paused = False
        self.save_by(actor, update_fields=fields)

    def cancel(self, *, actor: Actor) -> None:
        self.check_editable()
        self.delete_by(actor)
