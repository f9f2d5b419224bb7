"""A deactivated user's open chat sockets close: at once, through a group every
socket of the user joins, and in any case on their next frame, which checks the
account again (the socket loaded the user once, when it connected).

Their browser sessions and API tokens already stop at the next request (Django's
ModelBackend and ApiToken.authenticate refuse inactive users) and their
scheduled tasks are not run (scheduler.runner)."""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from django.db import transaction
from redis.exceptions import RedisError

from sessions_app.broadcast import channel_layer

log = logging.getLogger(__name__)

# The close code of a socket without a (usable) account, as for an anonymous one.
NOT_ALLOWED = 4403
DEACTIVATED = "user.deactivated"  # the message type; ChatConsumer.user_deactivated


def user_group(user_id: int) -> str:
    """The group of all the user's chat sockets, in any process."""
    return f"user.{user_id}"


def is_active(user_id: int) -> bool:
    return get_user_model().objects.filter(pk=user_id, is_active=True).exists()


def close_sockets_when_deactivated(sender: Any, instance: Any, **kwargs: Any) -> None:
    """The user model's post_save receiver: after the commit, so that a socket's
    own check (is_active) sees the change too."""
    if not instance.is_active:
        transaction.on_commit(lambda: close_sockets(instance.pk))


def close_sockets(user_id: int) -> None:
    try:
        async_to_sync(channel_layer().group_send)(user_group(user_id), {"type": DEACTIVATED})
    except (RedisError, OSError) as exc:  # the sockets still close on their next frame
        log.warning("could not close the sockets of deactivated user %s: %s", user_id, exc)
