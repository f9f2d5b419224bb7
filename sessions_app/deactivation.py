"""A deactivated user's open chat sockets close: at once, through a group every
socket of the user joins, and in any case on their next frame, which checks the
account again (the socket loaded the user once, when it connected). Their
running turns stop, in whichever process runs them (the chat's /stop signal),
and their inputs still waiting are dropped: a stream (/v1) or an API call
waiting on one ends.

Their browser sessions and API tokens already stop at the next request (Django's
ModelBackend and ApiToken.authenticate refuse inactive users) and their
scheduled tasks are not run (scheduler.due_tasks)."""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from django.db import transaction
from redis.exceptions import RedisError

from agent.frames import Outcome
from sessions_app.broadcast import STOP, channel_layer, signal
from sessions_app.models import ChatClaim, ChatInput

log = logging.getLogger(__name__)

# The close code of a socket without a (usable) account, as for an anonymous one.
NOT_ALLOWED = 4403
STOPPED = "The account was deactivated."
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
        transaction.on_commit(lambda: stop_turns(instance.pk))


def close_sockets(user_id: int) -> None:
    try:
        async_to_sync(channel_layer().group_send)(user_group(user_id), {"type": DEACTIVATED})
    except (RedisError, OSError) as exc:  # the sockets still close on their next frame
        log.warning("could not close the sockets of deactivated user %s: %s", user_id, exc)


def stop_turns(user_id: int) -> None:
    """The user's waiting inputs dropped (one an API call waits for ends with an
    error), then each running one stopped by its holder, as /stop does."""
    waiting = ChatInput.objects.filter(owner_id=user_id, status=ChatInput.Status.QUEUED)
    ended = Outcome(session_id="", status="error", error=STOPPED).as_json()
    waiting.filter(awaited=True).update(status=ChatInput.Status.DONE, outcome=ended)
    waiting.filter(awaited=False).delete()
    held = ChatClaim.objects.filter(owner_id=user_id).exclude(token="")
    for key in held.values_list("key", flat=True):
        async_to_sync(signal)(user_id, key, STOP)  # lost without the channel layer: logged
