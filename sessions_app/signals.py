from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from sessions_app import deactivation
from sessions_app.models import Session


@receiver(post_delete, sender=Session)
def delete_session_events(sender: type[Session], instance: Session, **kwargs: Any) -> None:
    # Events name their session by id only (memory knows nothing of sessions),
    # so they go with it here rather than by a database cascade.
    instance.events().delete()


post_save.connect(
    deactivation.close_sockets_when_deactivated,
    sender=settings.AUTH_USER_MODEL,
    dispatch_uid="close-deactivated-sockets",
)
