"""Renaming an agent. Its name is more than a label: it is its workspace
directory, a part of its chats' session keys, and the `agent` of its events,
memory files and their chunks. A rename changes all of them at once, in one
transaction with the directory moved last (moved back if the commit fails), and
only while none of its chats is answering or has inputs waiting."""

from __future__ import annotations

import os

from django.db import transaction
from django.utils import timezone

from memory.models import Event, ForgottenEvent, MemoryChunk, MemoryFile
from memory.workspace import DEFAULT_AGENT, AgentNameError, check_agent_name, workspace_dir
from sessions_app.keys import SessionKey
from sessions_app.models import Agent, ChatClaim, ChatInput, Session


class RenameError(Exception):
    """Why the agent keeps its name; the message is for the user."""


def rename_agent(agent: Agent, new_name: str) -> Agent:
    old_name = agent.name
    if new_name == old_name:
        return agent
    if old_name == DEFAULT_AGENT:
        raise RenameError(f"“{DEFAULT_AGENT}” is the default agent: new chats start with it.")
    try:
        check_agent_name(new_name)
    except AgentNameError as exc:
        raise RenameError(str(exc)) from None
    owner_id = agent.owner_id
    old_dir = workspace_dir(owner_id, old_name, create=False)
    new_dir = workspace_dir(owner_id, new_name, create=False)
    moved = False
    try:
        with transaction.atomic():
            if Agent.objects.filter(owner_id=owner_id, name=new_name).exists():
                raise RenameError(f"You already have an agent named {new_name!r}.")
            sessions = list(
                Session.objects.select_for_update().filter(owner_id=owner_id, agent=agent)
            )
            keys = {session.key: rekeyed(session, new_name) for session in sessions}
            check_idle(owner_id, list(keys))
            Agent.objects.filter(pk=agent.pk).update(name=new_name, updated_at=timezone.now())
            for session in sessions:
                Session.objects.filter(pk=session.pk).update(key=keys[session.key])
            for old_key, new_key in keys.items():
                ChatInput.objects.filter(owner_id=owner_id, key=old_key).update(key=new_key)
                ChatClaim.objects.filter(owner_id=owner_id, key=old_key).update(key=new_key)
            for table in (Event, MemoryFile, MemoryChunk, ForgottenEvent):
                rows = table.objects.filter(owner_id=owner_id, agent=old_name)
                rows.update(agent=new_name)
            if os.path.lexists(new_dir):
                raise RenameError(f"A workspace named {new_name!r} is in the way; nothing changed.")
            if old_dir.is_dir() and not old_dir.is_symlink():
                os.rename(old_dir, new_dir)  # the directory itself: no link inside is followed
                moved = True
    except BaseException:
        if moved:
            os.rename(new_dir, old_dir)
        raise
    agent.name = new_name
    return agent


def rekeyed(session: Session, new_name: str) -> str:
    if session.is_scheduled:  # cron:<task>: no agent in the key
        return session.key
    return str(SessionKey(agent=new_name, channel=session.channel, chat=session.chat))


def check_idle(owner_id: int, keys: list[str]) -> None:
    busy = (
        ChatInput.objects.filter(
            owner_id=owner_id,
            key__in=keys,
            status__in=[ChatInput.Status.QUEUED, ChatInput.Status.RUNNING],
        ).exists()
        or ChatClaim.objects.filter(owner_id=owner_id, key__in=keys, lease_until__gt=timezone.now())
        .exclude(token="")
        .exists()
    )
    if busy:
        raise RenameError(
            "One of the agent's chats is answering or has messages waiting; "
            "rename it once they are done."
        )
