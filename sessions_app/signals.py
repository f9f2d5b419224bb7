from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import QuerySet
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from agent.models import ApprovalRequest
from memory.forgetting import forget_sessions
from neotask_site.history import Actor
from sessions_app import deactivation
from sessions_app.models import Session


@receiver(post_delete, sender=Session)
def delete_session_events(
    sender: type[Session], instance: Session, origin: Any = None, **kwargs: Any
) -> None:
    # Events name their session by id only (memory knows nothing of sessions),
    # so they go with it here rather than by a database cascade, and through
    # memory.forgetting, whoever deletes the session (chat page, API, admin,
    # cleanup). Deleting the user deletes their events and logs by cascade.
    deleting = origin.model if isinstance(origin, QuerySet) else type(origin)
    if deleting is get_user_model():
        return
    forget_sessions(instance.owner, [str(instance.pk)], Actor.system("a session deleted"))
    # The commands the agent asked to run there quote the chat too.
    ApprovalRequest.objects.filter(owner_id=instance.owner_id, session_id=str(instance.pk)).delete()


post_save.connect(
    deactivation.close_sockets_when_deactivated,
    sender=settings.AUTH_USER_MODEL,
    dispatch_uid="close-deactivated-sockets",
)
