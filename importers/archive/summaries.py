"""Imported summaries and compactions linked to the imported events they condensed,
their data's archive ids made this instance's (importers.archive.importing)."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from memory.models import Event, EventType
from sessions_app.models import Session

BATCH = 500  # rows per insert
# A summary's or compaction's data naming events and sessions by their archive ids.
EVENT_ID_KEYS = ("first_event_id", "last_event_id")


def link_summaries(
    condensing: list[tuple[Event, list[int] | None]],
    events: dict[int, Event],
    sessions: dict[str, Session],
) -> None:
    """Each imported summary (and compaction) linked to the imported events it
    condensed, its data's ids made this instance's, and the events a summary
    condensed marked consolidated: consolidation does not summarise them again,
    and deleting one deletes the summary (memory.forgetting), as for native ones."""
    links = []
    now = timezone.now()
    for summary, carried in condensing:
        sources = carried if carried is not None else sources_by_range(summary, events)
        new = [events[old] for old in sources if old in events]
        links += [
            Event.condensed.through(from_event_id=summary.pk, to_event_id=event.pk) for event in new
        ]
        Event.objects.filter(pk=summary.pk).update(data=remapped(summary.data, events, sessions))
        if carried is None and summary.event_type == EventType.SUMMARY:
            # An older archive: what its summary condensed was consolidated.
            Event.objects.filter(
                pk__in=[event.pk for event in new], consolidated_at__isnull=True
            ).update(consolidated_at=now)
    Event.condensed.through.objects.bulk_create(links, batch_size=BATCH)


def sources_by_range(summary: Event, events: dict[int, Event]) -> list[int]:
    """A summary of an archive that carries no sources: its session's turns between
    its first and last event (consolidation's own range, memory.forgetting)."""
    data = summary.data if isinstance(summary.data, dict) else {}
    first, last = data.get("first_event_id"), data.get("last_event_id")
    if summary.event_type != EventType.SUMMARY:
        return []
    if not isinstance(first, int) or not isinstance(last, int):
        return []
    return [
        old
        for old, event in events.items()
        if first <= old <= last
        and event.session_id == summary.session_id
        and event.event_type in EventType.TURNS
    ]


def remapped(data: Any, events: dict[int, Event], sessions: dict[str, Session]) -> Any:
    """A summary's data with the archive's event and session ids made the imported
    ones' (or left out when they are not in the archive): never another row's id."""
    if not isinstance(data, dict):
        return data
    data = dict(data)
    for key in EVENT_ID_KEYS:
        if key in data:
            event = events.get(data[key]) if isinstance(data[key], int) else None
            if event is None:
                del data[key]
            else:
                data[key] = event.pk
    if isinstance(data.get("carried_over"), list):
        data["carried_over"] = [
            events[old].pk for old in data["carried_over"] if isinstance(old, int) and old in events
        ]
    if "continues_from" in data:
        session = sessions.get(str(data["continues_from"]))
        if session is None:
            del data["continues_from"]
        else:
            data["continues_from"] = str(session.pk)
    return data
