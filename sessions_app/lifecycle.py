"""When a session ends and the next begins.

A session goes stale at the daily reset hour (local time, default 04:00) or
after `idle_minutes` without activity, whichever comes first; this is checked
when the next message arrives. A rollover keeps all history: the old session
is archived (still readable), the new one continues from it and opens with a
notice saying why — never a silent reset.
"""

from __future__ import annotations

from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from memory import recording
from memory.models import EventType
from sessions_app.models import Session


def rollover(session: Session, reason: str) -> Session:
    """Archive `session` and start a fresh one under the same key; the new
    session opens with a visible notice saying why."""
    with transaction.atomic():
        fresh = session.continue_as()
        if fresh is None:
            # Someone else rolled it over a moment ago: use theirs.
            return Session.objects.get(
                owner=session.owner, key=session.key, status=Session.Status.ACTIVE
            )
        recording.record(
            session.owner,
            str(fresh.pk),
            EventType.SESSION_START,
            {
                "content": f"New session started: {reason}.",
                "reason": reason,
                "continues_from": str(session.pk),
            },
        )
    return fresh


def last_daily_reset(now: datetime, hour: int, zone: ZoneInfo) -> datetime:
    """The most recent moment the clock in `zone` showed `hour`:00, at or before `now`.

    On the night the clocks skip that hour (DST), the wall time is read with
    the offset in force before the jump, so the reset happens once, at the jump."""
    local = now.astimezone(zone)
    boundary = datetime.combine(local.date(), time(hour), tzinfo=zone)
    if boundary > now:
        boundary = datetime.combine(local.date() - timedelta(days=1), time(hour), tzinfo=zone)
    return boundary


def stale_reason(session: Session, now: datetime) -> str | None:
    """Why `session` must roll over before taking a message at `now`, or None."""
    options = settings.NEOTASK["sessions"]
    zone = ZoneInfo(settings.NEOTASK["server"]["time_zone"])
    hour = options["daily_reset_hour"]
    due: list[tuple[datetime, str]] = []
    boundary = last_daily_reset(now, hour, zone)
    if session.last_activity_at < boundary:
        due.append((boundary, f"daily reset at {hour:02d}:00"))
    idle = options["idle_minutes"]
    if idle and now - session.last_activity_at >= timedelta(minutes=idle):
        plural = "" if idle == 1 else "s"
        due.append(
            (session.last_activity_at + timedelta(minutes=idle), f"idle for {idle} minute{plural}")
        )
    return min(due)[1] if due else None


def has_conversation(session: Session) -> bool:
    return session.events().exclude(event_type=EventType.SESSION_START).exists()


def ensure_fresh(session: Session, now: datetime | None = None) -> tuple[Session, str | None]:
    """The session to use for a message arriving now, and the reason if it is new."""
    now = now or timezone.now()
    reason = stale_reason(session, now)
    if reason is None:
        return session, None
    if not has_conversation(session):
        # Nothing said yet: a new session would only add noise.
        Session.objects.filter(pk=session.pk).update(last_activity_at=now)
        session.last_activity_at = now
        return session, None
    return rollover(session, reason), reason
