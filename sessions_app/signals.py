from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db.models import QuerySet
from django.db.models.signals import m2m_changed, post_delete, post_save
from django.dispatch import receiver

from agent.models import ApprovalRequest
from core.history import Actor
from memory.forgetting import forget_sessions, forgotten
from sessions_app import chat_deletion, deactivation, quotas
from sessions_app.models import GroupQuota, Session


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
    chat_deletion.free_claims(instance.owner, str(instance.pk))


forgotten.connect(chat_deletion.drop_copies, dispatch_uid="forgotten-chat-copies")


post_save.connect(
    deactivation.close_sockets_when_deactivated,
    sender=settings.AUTH_USER_MODEL,
    dispatch_uid="close-deactivated-sockets",
)

# Whose limits a group's quota sets, and what they are: kept a moment per process.
for signal in (post_save, post_delete):
    signal.connect(quotas.GROUP_LIMITS.clear, sender=GroupQuota, dispatch_uid="quota-limits")
    signal.connect(quotas.GROUP_LIMITS.clear, sender=Group, dispatch_uid="quota-groups")
m2m_changed.connect(
    quotas.GROUP_LIMITS.clear,
    sender=get_user_model().groups.through,
    dispatch_uid="quota-members",
)
