"""What tests put in the database: one row of every owned model (for tests that
must cover them all), scheduled tasks and their dates, facts, a logged-in
session, the terminal permission; and the jobs those writes queued."""

from __future__ import annotations

import contextlib
import secrets
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth.models import Permission, User
from django.contrib.sessions.backends.db import SessionStore
from django.db import models
from django.utils import timezone

from agent.models import (
    ApprovalRequest,
    McpAllowedCall,
    McpServer,
    ModelProvider,
    TerminalAllowedPrefix,
)
from core.history import Actor
from core.models import Change, SignOnLink
from importers.models import ExportJob, ImportedArchive, ImportJob
from memory import recording
from memory.models import Event, Fact, ForgottenEvent, Macro, MemoryChunk, MemoryFile
from monitoring.models import Counter
from scheduler.models import ScheduledTask
from sessions_app.models import (
    Agent,
    ApiToken,
    ChatClaim,
    ChatInput,
    DailyUsage,
    GroupQuota,
    Session,
)

# Neotask's own apps; every model of theirs that holds user data is in OWNED_MODELS.
PROJECT_APPS = [
    "memory",
    "sessions_app",
    "scheduler",
    "agent",
    "neotask_site",
    "importers",
    "monitoring",
]
# The site's own settings and counters, no one's data (no owner, no user in them).
SITE_MODELS = [ModelProvider, Counter, GroupQuota]
OWNED_MODELS = [
    Agent,
    Session,
    Event,
    Fact,
    Macro,
    MemoryFile,
    MemoryChunk,
    ScheduledTask,
    TerminalAllowedPrefix,
    ApprovalRequest,
    McpServer,
    McpAllowedCall,
    ApiToken,
    ImportJob,
    ExportJob,
    ImportedArchive,
    ChatInput,
    ChatClaim,
    ForgottenEvent,
    Change,
    DailyUsage,
    SignOnLink,
]


def make_rows(owner: Any, tag: str = "") -> dict[type[models.Model], models.Model]:
    agent = Agent.objects.default_for(owner)
    session = Session.start(owner, agent, "web", f"chat{tag}", title=f"Chat {tag}")
    memory_file = MemoryFile.objects.create(owner=owner, path=f"memory/notes{tag}.md", size=6)
    fact = Fact.objects.create(owner=owner, category="pref", key=f"color{tag}", value="blue")
    mcp_server = McpServer.objects.create(
        owner=owner, name=f"tools{tag}", url=f"http://127.0.0.1:9/{tag}"
    )
    return {
        Agent: agent,
        Session: session,
        Event: recording.record(
            owner, str(session.pk), "user_message", {"content": f"hello {tag}"}
        ),
        Fact: fact,
        Macro: Macro.objects.create(
            owner=owner, trigger_tool=f"search_memory{tag}", next_tool="terminal"
        ),
        MemoryFile: memory_file,
        MemoryChunk: MemoryChunk.objects.create(
            owner=owner,
            file=memory_file,
            position=0,
            start_line=1,
            end_line=1,
            text=f"notes {tag}",
            content_hash=f"hash{tag}",
        ),
        ScheduledTask: ScheduledTask.objects.create(
            owner=owner,
            name=f"Task {tag}",
            cron_expr="0 9 * * 1-5",
            original_schedule="weekdays at 9am",
            prompt="Summarise",
            agent=agent,
            next_run_at=timezone.now(),
        ),
        TerminalAllowedPrefix: TerminalAllowedPrefix.objects.create(owner=owner, prefix=f"ls{tag}"),
        ApprovalRequest: ApprovalRequest.objects.create(
            owner=owner, session_id=str(session.pk), command=f"rm {tag}", prefix="rm"
        ),
        # Not ApiToken.issue, which records its creation: one Change row per owner here.
        ApiToken: ApiToken.objects.create(
            owner=owner, name=f"Script {tag}", prefix=secrets.token_hex(6), secret_hash=tag
        ),
        McpServer: mcp_server,
        McpAllowedCall: McpAllowedCall.objects.create(
            owner=owner,
            server=mcp_server,
            url=mcp_server.url,
            call=f'mcp_tools{tag}__look {{"at": "{tag}"}}',
            digest=f"digest{tag}",
        ),
        ImportJob: ImportJob.objects.create(owner=owner, kind="aidaemon", filename=f"db{tag}"),
        ExportJob: ExportJob.objects.create(owner=owner, filename=f"export{tag}.zip"),
        ImportedArchive: ImportedArchive.objects.create(
            owner=owner, digest=f"{tag:0>64}"[-64:], label=f"Neotask export {tag}.zip"
        ),
        ChatInput: ChatInput.objects.create(owner=owner, key=session.key, text=f"queued {tag}"),
        ChatClaim: ChatClaim.objects.create(owner=owner, key=session.key),
        ForgottenEvent: ForgottenEvent.objects.create(owner=owner, event_id=0),
        Change: Change.objects.create(
            owner=owner,
            actor_kind=Change.Actor.USER,
            subject_kind=Change.Subject.FACT,
            subject_id=str(fact.pk),
            subject_label=str(fact),
            action=Change.Action.CREATED,
            new_value={"value": f"blue {tag}"},
        ),
        # One row a day: a second make_rows for the same owner shares it.
        DailyUsage: DailyUsage.objects.get_or_create(owner=owner, day=timezone.localdate())[0],
        # One a provider: a second make_rows for the same owner shares it.
        SignOnLink: SignOnLink.objects.get_or_create(
            owner=owner, issuer="https://sso.example.org", defaults={"subject": owner.username}
        )[0],
    }


def take_queued_tasks() -> list[dict]:
    """The jobs waiting in the django-q2 broker (ORM, or Redis on the team
    profile), taken off it so that each test starts with an empty queue."""
    from django.core.signing import BadSignature
    from django_q.brokers import get_broker
    from django_q.signing import SignedPackage

    broker = get_broker()
    waiting = broker.queue_size()
    tasks: list[dict] = []
    while len(tasks) < waiting:
        batch = broker.dequeue()
        if not batch:
            break
        for _, payload in batch:
            with contextlib.suppress(BadSignature):  # another run's job (shared Redis)
                tasks.append(SignedPackage.loads(payload))
    broker.purge_queue()
    return tasks


def login_session(user: User) -> str:
    """A new browser session of `user`'s, logged in as the login page logs in: its
    key, the session cookie's value."""
    store = SessionStore()
    store[SESSION_KEY] = str(user.pk)
    store[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    store[HASH_SESSION_KEY] = user.get_session_auth_hash()
    store.create()
    assert store.session_key is not None
    return store.session_key


def allow_terminal(user: User) -> User:
    """Give `user` the permission to run and approve terminal commands."""
    user.user_permissions.add(Permission.objects.get(codename="use_terminal"))
    return user


# A scheduled task's dates: the server in Berlin, a Friday morning, and the
# next weekday-9am run after it.
BERLIN = ZoneInfo("Europe/Berlin")
FRIDAY = datetime(2026, 6, 5, 10, 0, tzinfo=BERLIN)
MONDAY_9 = datetime(2026, 6, 8, 9, 0, tzinfo=BERLIN)


def make_task(owner: User, name: str = "Report", **fields: Any) -> ScheduledTask:
    values: dict[str, Any] = {
        "cron_expr": "0 9 * * 1-5",
        "original_schedule": "every weekday at 9am",
        "prompt": "summarise my open todos",
        "time_zone": "Europe/Berlin",
        "next_run_at": MONDAY_9,
        "agent": Agent.objects.default_for(owner),
        **fields,
    }
    return ScheduledTask.objects.create(owner=owner, name=name, **values)


def config_task(**fields: Any) -> dict[str, Any]:
    """A [[scheduled_tasks]] entry of config.toml, as load_config returns it."""
    values = {
        "name": "Morning brief",
        "schedule": "daily at 7am",
        "prompt": "brief me",
        "owner": "alice",
        "agent": "main",
        "trusted": False,
    }
    return {**values, **fields}


def make_fact(owner: User, category: str = "preference", key: str = "color", **fields: Any) -> Fact:
    values = {"value": "green", "source": Fact.Source.AGENT, **fields}
    return Fact.objects.create(owner=owner, category=category, key=key, **values)


def fact_saved_in(owner: User, turn: Event, category: str, key: str, value: str) -> Fact:
    """A fact the agent saved in the turn of `turn` (its tool call), with its history."""
    fact, _ = Fact.objects.remember(
        owner,
        category,
        key,
        value,
        actor=Actor.agent("main"),
        source=Fact.Source.AGENT,
        origin=Fact.Origin.TURN,
        origin_event_id=turn.pk,
        origin_session_id=turn.session_id,
    )
    return fact
