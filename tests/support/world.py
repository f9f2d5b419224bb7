"""Alice's world for the isolation suite: one row of everything she can own, each
carrying a secret marker, plus what bob may not change or see of it.

Every secret is `MARK-<what>`, so one pattern finds any of them in a response;
a marker bob typed into his own request may come back to him (a search box, an
error naming his input) and is not a leak.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import models
from django.utils import timezone

from agent.models import ApprovalRequest, McpAllowedCall, McpServer, TerminalAllowedPrefix
from core.history import Actor
from core.models import Change, SignOnLink
from core.sealing import seal
from importers.archive.writing import export_user
from importers.models import ExportJob, ImportedArchive, ImportJob
from memory import recording, tasks
from memory.files.indexing import index_workspace
from memory.files.paths import write_memory_file
from memory.models import Event, Fact, ForgottenEvent, Macro, MemoryChunk, MemoryFile
from memory.workspace import workspace_dir
from scheduler.models import ScheduledTask
from sessions_app import chat
from sessions_app.models import Agent, ApiToken, ChatClaim, ChatInput, DailyUsage, Session
from tests.support.records import OWNED_MODELS

MARK = "alice-secret-7f3a"
SECRET = re.compile(re.escape(MARK) + r"(?:-[a-z0-9]+)+")
LONG_AGO = timezone.now() - timedelta(days=90)


def secret(what: str) -> str:
    return f"{MARK}-{what}"


# What alice said, written so that bob's questions below are their best matches.
VAULT = f"Remember this: the vault code of the lake house is 4417. {secret('vault')}"
SISTER = f"My sister Marguerite moved to Lyon to study architecture. {secret('sister')}"
MEMORY_MD = f"# Home\nThe spare key is hidden under the blue flower pot. {secret('memory-md')}\n"
TRIP = f"# Trips\nFlight to Osaka on May 2nd, window seat. {secret('file-trip')}\n"


@dataclass
class World:
    user: User
    agent: Agent
    chat: Session  # active web chat
    archived: Session  # an old session of another chat: a cleanup candidate
    cron: Session  # the scheduled task's chat
    pinned: Event  # the vault code, importance 1.0
    answer: Event
    summary: Event
    fact: Fact
    macro: Macro
    task: ScheduledTask
    prefix: TerminalAllowedPrefix
    approval: ApprovalRequest
    mcp_server: McpServer
    mcp_call: McpAllowedCall
    token: ApiToken
    token_text: str
    import_job: ImportJob
    export_job: ExportJob  # done: its archive is on disk
    workspace: Path
    rows: dict[type[models.Model], models.Model] = field(default_factory=dict)

    @property
    def identifiers(self) -> list[str]:
        """Ids and keys of alice's rows that bob has no business seeing."""
        return [
            *(str(s.pk) for s in (self.chat, self.archived, self.cron)),
            *(s.key for s in (self.chat, self.archived)),
            str(self.task.pk),
            str(self.approval.pk),
            str(self.import_job.pk),
            str(self.export_job.pk),
            self.token.prefix,
            self.token_text,
        ]


def build_alice(alice: User) -> World:
    """Everything alice can own, each row marked; memory embedded and indexed."""
    alice.email = "alice@example.org"
    alice.save(update_fields=["email"])
    agent = Agent.objects.default_for(alice)
    agent.system_prompt = f"You are alice's assistant. {secret('persona')}"
    agent.save()
    Agent.objects.create(owner=alice, name=secret("agent"))
    active = chat.start_chat(alice)
    Session.objects.filter(pk=active.pk).update(title=secret("title"))
    active.refresh_from_db()
    session_id = str(active.pk)
    pinned = recording.record(alice, session_id, "user_message", {"content": VAULT}, importance=1.0)
    answer = recording.record(
        alice, session_id, "assistant_response", {"content": f"Noted. {secret('answer')}"}
    )
    recording.record(
        alice,
        session_id,
        "tool_result",
        {"tool_call_id": "c1", "name": "terminal", "content": secret("tool-output")},
        tool_name="terminal",
    )
    archived = Session.start(
        alice,
        agent,
        "web",
        "old-chat",
        title=secret("old-title"),
        status=Session.Status.ARCHIVED,
        last_activity_at=LONG_AGO,
    )
    recording.record(alice, str(archived.pk), "user_message", {"content": SISTER})
    summary = recording.record(
        alice,
        str(archived.pk),
        "summary",
        {"content": f"Alice's sister lives in Lyon. {secret('summary')}"},
        importance=0.9,
    )
    task = ScheduledTask.objects.create(
        owner=alice,
        agent=agent,
        name=secret("task"),
        cron_expr="0 9 * * *",
        original_schedule="daily at 9am",
        prompt=f"Check the lake house vault code. {secret('task-prompt')}",
        next_run_at=timezone.now() + timedelta(hours=1),
    )
    cron = Session.start(alice, agent, "cron", str(task.pk), title=secret("cron-title"))
    recording.record(alice, str(cron.pk), "assistant_response", {"content": secret("cron-answer")})
    # Remembered in her chat: its provenance and its history name her turn and chat.
    fact, _ = Fact.objects.remember(
        alice,
        "home",
        secret("fact-key"),
        secret("fact-value"),
        actor=Actor.agent(agent.name),
        source=Fact.Source.AGENT,
        origin=Fact.Origin.TURN,
        origin_event_id=answer.pk,
        origin_session_id=session_id,
    )
    macro = Macro.objects.create(
        owner=alice, trigger_tool=secret("macro-tool"), next_tool="terminal"
    )
    prefix = TerminalAllowedPrefix.objects.create(owner=alice, prefix=f"echo {secret('prefix')}")
    approval = ApprovalRequest.objects.create(
        owner=alice,
        session_id=session_id,
        command=f"{secret('command')} --now",
        prefix=secret("command"),
    )
    mcp_server = McpServer.objects.create(
        owner=alice,
        name="lake_house",
        url=f"http://127.0.0.1:9/{secret('mcp-url')}",
        sealed_token=seal(secret("mcp-token")),
        tools=[{"name": "vault", "description": secret("mcp-tool"), "input_schema": {}}],
    )
    call = f'mcp_lake_house__vault {{"code": "{secret("mcp-call")}"}}'
    mcp_call = McpAllowedCall.objects.create(
        owner=alice,
        server=mcp_server,
        url=mcp_server.url,
        call=call,
        digest=McpAllowedCall.digest_of(call),
    )
    token, token_text = ApiToken.issue(alice, secret("token"))
    import_job = ImportJob.objects.create(
        owner=alice, kind="openclaw", filename=f"{secret('import')}.zip", error=secret("import")
    )

    workspace = workspace_dir(alice.pk, agent.name)
    write_memory_file(workspace, "MEMORY.md", MEMORY_MD)
    write_memory_file(workspace, f"memory/{secret('notes')}.md", TRIP)
    index_workspace(alice, agent.name)
    tasks.embed_missing()
    export_job = ExportJob.objects.create(owner=alice, status=ExportJob.Status.DONE)
    export_job.filename = f"{secret('export')}.zip"
    export_job.folder.mkdir(parents=True)
    export_user(alice, export_job.folder / export_job.filename)
    export_job.save()
    memory_file = MemoryFile.objects.get(owner=alice, path="MEMORY.md")
    return World(
        user=alice,
        agent=agent,
        chat=active,
        archived=archived,
        cron=cron,
        pinned=pinned,
        answer=answer,
        summary=summary,
        fact=fact,
        macro=macro,
        task=task,
        prefix=prefix,
        approval=approval,
        mcp_server=mcp_server,
        mcp_call=mcp_call,
        token=token,
        token_text=token_text,
        import_job=import_job,
        export_job=export_job,
        workspace=workspace,
        rows={
            Agent: agent,
            Session: active,
            Event: pinned,
            Fact: fact,
            Macro: macro,
            MemoryFile: memory_file,
            MemoryChunk: MemoryChunk.objects.filter(file=memory_file).order_by("pk")[0],
            ScheduledTask: task,
            TerminalAllowedPrefix: prefix,
            ApprovalRequest: approval,
            McpServer: mcp_server,
            McpAllowedCall: mcp_call,
            ApiToken: token,
            ImportJob: import_job,
            ExportJob: export_job,
            ImportedArchive: ImportedArchive.objects.create(
                owner=alice, digest="a" * 64, label=f"Neotask export {secret('archive')}.zip"
            ),
            # Answered, its outcome not yet read by the API call that waits for it.
            ChatInput: ChatInput.objects.create(
                owner=alice,
                key=active.key,
                text=secret("queued"),
                status=ChatInput.Status.DONE,
                awaited=True,
                outcome={"answer": secret("outcome")},
            ),
            ChatClaim: ChatClaim.objects.create(owner=alice, key=active.key),
            ForgottenEvent: ForgottenEvent.objects.create(owner=alice, event_id=0),
            Change: Change.objects.owned_by(alice).get(
                subject_kind=Change.Subject.FACT, subject_id=str(fact.pk)
            ),
            DailyUsage: DailyUsage.objects.create(
                owner=alice, day=timezone.localdate(), messages=3, tokens=123_457
            ),
            SignOnLink: SignOnLink.objects.create(
                owner=alice, issuer="https://sso.example.org", subject=secret("subject")
            ),
        },
    )


def build_bob(bob: User) -> Session:
    """Bob's own chat, with memories of his own: every branch has something of his to
    return, so an empty answer cannot pass for isolation."""
    session = chat.start_chat(bob)
    recording.record(bob, "bob-old", "user_message", {"content": "My bike lock code is 2020."})
    pinned = {"content": "Pinned: bob's gym is open late."}
    recording.record(bob, "bob-old", "user_message", pinned, importance=1.0)
    recording.record(bob, str(session.pk), "user_message", {"content": "What is on for today?"})
    Fact.objects.remember(
        bob,
        "sport",
        "gym",
        "open late",
        actor=Actor.user(bob),
        source=Fact.Source.USER,
        origin=Fact.Origin.MESSAGE,
        origin_session_id=str(session.pk),
    )
    write_memory_file(workspace_dir(bob.pk, "main"), "memory/bob.md", "# Bob\nTea.\n")
    index_workspace(bob, "main")
    tasks.embed_missing()
    return session


def snapshot(user: User) -> dict[str, Any]:
    """All of a user's rows, their account and their workspace files, to compare
    before and after someone else's attempts."""
    rows = {
        model.__name__: list(model.objects.filter(owner=user).order_by("pk").values())
        for model in OWNED_MODELS
    }
    account = dict(User.objects.filter(pk=user.pk).values().get())
    account.pop("last_login")
    root = Path(settings.DATA_DIR) / "workspaces" / str(user.pk)
    disk = {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }
    return {"rows": rows, "account": account, "files": disk}


def leaks(text: str, world: World, asked: str = "") -> list[str]:
    """Alice's secrets and identifiers found in `text`, except what `asked` (bob's own
    request) contained."""
    found = [marker for marker in SECRET.findall(text) if marker not in asked]
    found += [ident for ident in world.identifiers if ident in text and ident not in asked]
    return found
