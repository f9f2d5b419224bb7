"""Consolidation runs with the fast model (memory.consolidation does the work)."""

from __future__ import annotations

from asgiref.sync import async_to_sync

from agent.llm import LLMClient, LLMError
from agent.providers import default_endpoint
from memory.consolidation import ConsolidationError, Report, consolidate


def complete_with_fast_model(messages: list[dict[str, str]]) -> str:
    client = LLMClient(default_endpoint(fast=True))
    try:
        return async_to_sync(client.stream)(messages).content
    except LLMError as exc:
        raise ConsolidationError(str(exc)) from None


def run(owner_id: int | None = None) -> Report:
    return consolidate(complete_with_fast_model, owner_id=owner_id)


def scheduled_consolidation() -> str:
    """The django-q2 job; its return value is the run's summary in the admin."""
    report = run()
    return (
        f"{report.summaries} summaries from {report.events} messages; facts: "
        f"{report.facts_added} added, {report.facts_updated} updated, "
        f"{report.facts_skipped} skipped; {len(report.failures)} failures"
    )


SCHEDULE = "memory: consolidate old conversation"


def install_schedule(sender: object, **kwargs: object) -> None:
    """Every `consolidation_interval_hours`, kept in sync at each `migrate`."""
    from django.conf import settings
    from django_q.models import Schedule

    hours = settings.NEOTASK["memory"]["consolidation_interval_hours"]
    Schedule.objects.update_or_create(
        name=SCHEDULE,
        defaults={
            "func": "agent.consolidation_job.scheduled_consolidation",
            "schedule_type": Schedule.MINUTES,
            "minutes": max(1, round(hours * 60)),
            "repeats": -1,
        },
    )
