"""Scheduled tasks: one due now, and what its runs left."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.utils import timezone

from memory.models import Event
from scheduler.models import ScheduledTask
from sessions_app.models import Agent, Session


def due(username: str, prompt: str) -> str:
    """A yearly task of the user's, due five minutes ago: its id."""
    owner = get_user_model().objects.get(username=username)
    task = ScheduledTask.objects.create(
        owner=owner,
        name="Yearly review",
        cron_expr="0 9 1 1 *",
        original_schedule="yearly",
        prompt=prompt,
        agent=Agent.objects.default_for(owner),
        next_run_at=timezone.now() - timedelta(minutes=5),
    )
    return str(task.pk)


def runs(task_id: str) -> dict[str, Any]:
    """The prompts and answers of the task's runs, whether it ran, and whether its
    next run is ahead."""
    task = ScheduledTask.objects.get(pk=task_id)
    events = Event.objects.filter(
        session_id__in=[str(s.pk) for s in Session.objects.filter(key=task.chat_key)]
    )
    return {
        "prompts": list(events.filter(event_type="user_message").values_list("text", flat=True)),
        "answers": list(
            events.filter(event_type="assistant_response").values_list("text", flat=True)
        ),
        "ran": task.last_run_at is not None,
        "next_run_in_future": task.next_run_at > timezone.now(),
    }
