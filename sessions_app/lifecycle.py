"""When a session ends and the next begins. A rollover keeps all history: the
old session is archived (still readable) and the new one continues from it."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from memory.models import Event, EventType
from sessions_app.models import Session


def rollover(session: Session, reason: str) -> Session:
    """Archive `session` and start a fresh one under the same key; the new
    session opens with a visible notice saying why."""
    with transaction.atomic():
        archived = Session.objects.filter(pk=session.pk, status=Session.Status.ACTIVE).update(
            status=Session.Status.ARCHIVED, updated_at=timezone.now()
        )
        if not archived:
            # Someone else rolled it over a moment ago: use theirs.
            return Session.objects.get(
                owner=session.owner, key=session.key, status=Session.Status.ACTIVE
            )
        fresh = Session.objects.create(
            owner=session.owner,
            agent=session.agent,
            key=session.key,
            channel=session.channel,
            chat=session.chat,
            title=session.title,
            continues_from=session,
        )
        Event.record(
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
