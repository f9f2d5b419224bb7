from __future__ import annotations

import hashlib
import uuid
from collections.abc import Collection
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from agent.rules import Rule, rule_for, rule_problem
from core.history import Actor, Recorded, as_json, record_change, snapshot
from core.models import Change
from core.ownership import OwnedModel

# A server's tool may do anything its server allows, with any arguments: "Allow
# always" remembers one call, that tool with exactly these arguments (McpAllowedCall),
# never a standing permission for the tool or its server.
MCP_ALWAYS = "exactly this call"
# Why a change asked for after outside text is never remembered.
LASTING_ONCE = (
    "Outside text (a tool's answer, a document) is in this turn and may have asked for this "
    "change: each one is allowed on its own."
)


class ApprovalError(Exception):
    """A decision that cannot be applied; the message is for the user."""


class TerminalAllowedPrefix(Recorded, OwnedModel):
    """A rule its owner chose to "Allow always" for the terminal tool: a
    program of the allow-list (agent.rules), plus git's subcommand."""

    prefix = models.CharField(max_length=500)
    # Off for prefixes that arrived with an import: only their owner, holding
    # the terminal permission, switches them on.
    active = models.BooleanField(default=True)
    switched_off_because = models.CharField(
        max_length=500,
        blank=True,
        help_text="Why an upgrade switched this rule off; empty if none did.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    history_subject = Change.Subject.TERMINAL_RULE
    history_fields = ("prefix", "active", "switched_off_because")

    class Meta:
        db_table = "terminal_allowed_prefixes"
        ordering = ["prefix"]
        verbose_name_plural = "terminal allowed prefixes"
        constraints = [
            models.UniqueConstraint(fields=["owner", "prefix"], name="terminal_prefix_unique"),
        ]
        permissions = [("use_terminal", "Can approve terminal commands")]

    def __str__(self) -> str:
        return self.prefix

    @property
    def problem(self) -> str | None:
        """Why the allow-list does not allow this rule now (it then covers nothing)."""
        return rule_problem(self.prefix)

    def switch_on(self, actor: Actor) -> None:
        self.active = True
        self.switched_off_because = ""
        self.save_by(actor, update_fields=["active", "switched_off_because"])

    def revoke(self, actor: Actor) -> None:
        self.delete_by(actor)

    @classmethod
    def allow_always(cls, owner_id: int, prefix: str, actor: Actor) -> None:
        """Store (or switch back on) the owner's rule `prefix`."""
        rule = cls.objects.filter(owner_id=owner_id, prefix=prefix).first()
        if rule is None:
            rule = cls(owner_id=owner_id, prefix=prefix)
        rule.active, rule.switched_off_because = True, ""
        rule.save_by(actor)


class ApprovalRequest(OwnedModel):
    """A terminal command, an MCP tool call or a lasting change (agent.tools.call_tool)
    waiting for (or given) its owner's decision.

    Stored, not held in memory, so that whichever server process receives the
    click, and a scheduled run with nobody watching, see the same request."""

    class Status(models.TextChoices):
        PENDING = "pending", "Waiting"
        APPROVED = "approved", "Approved"
        DENIED = "denied", "Denied"
        EXPIRED = "expired", "Expired"

    class Decision(models.TextChoices):
        ONCE = "once", "Allow once"
        ALWAYS = "always", "Allow always"
        DENY = "deny", "Deny"

    class Kind(models.TextChoices):
        TERMINAL = "terminal", "Terminal command"
        MCP = "mcp", "MCP tool call"  # `command` is the tool's name and its arguments
        # A change to memory or the schedule after outside text entered the turn;
        # `command` as for MCP. Asked each time: there is no "Allow always".
        LASTING = "lasting", "Memory or schedule change"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session_id = models.CharField(max_length=255)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.TERMINAL)
    command = models.TextField()
    prefix = models.CharField(
        max_length=500,
        blank=True,
        help_text="What 'Allow always' would store; empty when it is not offered.",
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    decision = models.CharField(max_length=16, choices=Decision.choices, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["owner", "status"], name="approval_owner_status")]

    def __str__(self) -> str:
        return self.command

    @property
    def rule(self) -> Rule:
        """What "Allow always" stores for this command, or why it is not offered."""
        if self.kind == ApprovalRequest.Kind.MCP:
            return Rule(MCP_ALWAYS)
        if self.kind == ApprovalRequest.Kind.LASTING:
            return Rule(None, LASTING_ONCE)
        return rule_for(self.command)

    def decide(self, decision: str, actor: Actor, server: McpServer | None = None) -> None:
        """Apply a person's decision, once: of two clicks (two tabs) only the first
        counts. "Allow always" also stores the rule, where the allow-list offers one,
        or for an MCP call the call itself, for `server`, whose tool it calls.
        Who may decide, and which server that is, is the caller's to find
        (agent.approvals.decide)."""
        if decision not in ApprovalRequest.Decision.values:
            raise ApprovalError("decision must be 'once', 'always' or 'deny'")
        rule = self.rule
        always = decision == ApprovalRequest.Decision.ALWAYS
        if always and rule.prefix is None:
            raise ApprovalError(rule.reason)
        if always and self.kind == ApprovalRequest.Kind.MCP and server is None:
            raise ApprovalError("Its MCP server is no longer offered to you: allow it once.")
        denied = decision == ApprovalRequest.Decision.DENY
        status = ApprovalRequest.Status.DENIED if denied else ApprovalRequest.Status.APPROVED
        with transaction.atomic():
            changed = ApprovalRequest.objects.filter(
                pk=self.pk, status=ApprovalRequest.Status.PENDING
            ).update(status=status, decision=decision, decided_at=timezone.now())
            if not changed:
                raise ApprovalError("This request was already answered or has expired.")
            if always and server is not None:
                McpAllowedCall.allow_always(self.owner_id, server, self.command, actor)
            elif always and rule.prefix is not None:
                TerminalAllowedPrefix.allow_always(self.owner_id, rule.prefix, actor)
        self.refresh_from_db()

    def expire(self) -> None:
        """Nobody decided in time (or the turn stopped): a late click finds it answered."""
        ApprovalRequest.objects.filter(pk=self.pk, status=ApprovalRequest.Status.PENDING).update(
            status=ApprovalRequest.Status.EXPIRED, decided_at=timezone.now()
        )

    def decision_now(self) -> str | None:
        """The decision as the database has it now: None while pending, "" if it expired."""
        return (
            ApprovalRequest.objects.filter(pk=self.pk)
            .exclude(status=ApprovalRequest.Status.PENDING)
            .values_list("decision", flat=True)
            .first()
        )


class ModelProvider(models.Model):
    """An OpenAI-compatible endpoint the admins connected (OpenAI, Ollama, vLLM,
    LM Studio, llama.cpp's server): its models are offered in every chat's
    picker to the groups it names (agent.providers). Site-wide, not owned: a
    person's data never goes in here, only where the models are."""

    name = models.CharField(max_length=100, unique=True)
    base_url = models.CharField(
        "Base URL", max_length=500, help_text="Usually ends in /v1, e.g. http://localhost:11434/v1"
    )
    # core.sealing; never sent to a page again, only its hint.
    sealed_api_key = models.TextField(blank=True)
    api_key_hint = models.CharField(max_length=16, blank=True)
    offered_models = models.TextField(
        "Models", help_text="The models it offers, one per line; the first is its default."
    )
    context_window = models.PositiveIntegerField(default=8192)
    is_default = models.BooleanField(
        "Default model", default=False, help_text="Its first model answers chats that chose none."
    )
    enabled = models.BooleanField(default=True)
    groups = models.ManyToManyField(
        "auth.Group",
        blank=True,
        related_name="model_providers",
        help_text="Who may choose its models; none chosen: everyone.",
    )
    tested_at = models.DateTimeField(null=True, blank=True)
    test_passed = models.BooleanField(default=False)
    test_message = models.CharField(max_length=1000, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Who set base_url: only an active superuser's URL may reach a private network
    # (agent.outbound); a URL staff set reaches public addresses only.
    url_set_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        editable=False,
    )

    # A change is recorded in the history of the staff member who made it (the
    # provider is the site's, not someone's); superusers read them all in the admin.
    history_fields = (
        "name",
        "base_url",
        "api_key_hint",
        "offered_models",
        "context_window",
        "is_default",
        "enabled",
    )

    class Meta:
        db_table = "model_providers"
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(
                fields=["is_default"],
                condition=models.Q(is_default=True),
                name="model_provider_one_default",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def validate_constraints(self, exclude: Collection[str] | None = None) -> None:
        # "One default" is not the form's to refuse: saving a new default (agent.forms)
        # makes it the only one, in the same transaction.
        super().validate_constraints(exclude={*(exclude or ()), "is_default"})

    def stored(self) -> dict[str, Any] | None:
        """As the database has it (None for a new one): what a change is compared with."""
        if self.pk is None:
            return None
        row = ModelProvider.objects.filter(pk=self.pk).values(*self.history_fields).first()
        return None if row is None else {name: as_json(row[name]) for name in self.history_fields}

    def record(self, user: Any, before: dict[str, Any] | None) -> None:
        """`user` (staff) created it (`before` None) or changed it: into their history."""
        action = Change.Action.CREATED if before is None else Change.Action.CHANGED
        after = snapshot(self, self.history_fields)
        kind, label = Change.Subject.MODEL_PROVIDER, self.name
        record_change(user, Actor.admin(user), kind, self.pk, label, action, before, after)

    def delete_by(self, user: Any) -> None:
        before, pk = self.stored(), self.pk
        with transaction.atomic():
            self.delete()
            record_change(
                user,
                Actor.admin(user),
                Change.Subject.MODEL_PROVIDER,
                pk,
                self.name,
                Change.Action.DELETED,
                before,
                None,
            )

    def record_test(self, passed: bool, message: str) -> None:
        self.tested_at, self.test_passed, self.test_message = timezone.now(), passed, message[:1000]
        self.save(update_fields=["tested_at", "test_passed", "test_message"])

    @property
    def model_names(self) -> list[str]:
        return [line.strip() for line in self.offered_models.splitlines() if line.strip()]


class McpServer(Recorded, OwnedModel):
    """An MCP server (streamable HTTP) whose tools its owner's agent may call, each
    call approved by them (agent.mcp.client). Its tool list is kept from the last
    time it answered (added or tested), so that a turn does not wait for it. A
    superuser's server may be offered to everyone: each user still approves each
    call, and never sees its token."""

    name = models.CharField(
        max_length=30,
        help_text="Lowercase letters, digits and _; its tools appear as mcp_<name>__<tool>.",
    )
    url = models.CharField("URL", max_length=500)
    # core.sealing, as a model provider's key; only its hint is shown again.
    sealed_token = models.TextField(blank=True)
    token_hint = models.CharField(max_length=16, blank=True)
    enabled = models.BooleanField(default=True)
    for_everyone = models.BooleanField(
        "Offer to everyone",
        default=False,
        help_text="Superusers only: its tools are offered to every user's agent, each call "
        "still approved by that user; a user's own server of the same name comes first.",
    )
    # [{"name", "description", "input_schema"}] as the server listed them.
    tools = models.JSONField(default=list, blank=True)
    listed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    history_subject = Change.Subject.MCP_SERVER
    history_fields = ("name", "url", "token_hint", "enabled", "for_everyone")

    class Meta:
        db_table = "mcp_servers"
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["owner", "name"], name="mcp_server_name_unique"),
        ]

    def __str__(self) -> str:
        return self.name


class McpAllowedCall(Recorded, OwnedModel):
    """An MCP tool call its owner chose to "Allow always": that tool of that server,
    at that URL, with exactly these arguments, runs from now on without asking.
    Other arguments, another tool, or the server moved to another URL still ask."""

    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="allowed_calls")
    url = models.CharField("URL", max_length=500, help_text="Where the server was when allowed.")
    call = models.TextField(help_text="The tool and its arguments, as the approval card showed.")
    digest = models.CharField(max_length=64, editable=False)  # of `call`, however long
    created_at = models.DateTimeField(auto_now_add=True)

    history_subject = Change.Subject.MCP_CALL
    history_fields = ("call", "url")

    class Meta:
        db_table = "mcp_allowed_calls"
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "server", "digest"], name="mcp_allowed_call_unique"
            ),
        ]

    def __str__(self) -> str:
        return self.call

    @staticmethod
    def digest_of(call: str) -> str:
        return hashlib.sha256(call.encode()).hexdigest()

    @classmethod
    def covers(cls, owner_id: int, server_id: int, url: str, call: str) -> bool:
        return cls.objects.filter(
            owner_id=owner_id, server_id=server_id, url=url, digest=cls.digest_of(call)
        ).exists()

    @classmethod
    def allow_always(cls, owner_id: int, server: McpServer, call: str, actor: Actor) -> None:
        """Remember `call` of a tool of `server` (agent.mcp.client.server_of_call)."""
        digest = cls.digest_of(call)
        allowed = cls.objects.filter(owner_id=owner_id, server=server, digest=digest).first()
        allowed = allowed or cls(owner_id=owner_id, server=server, digest=digest, call=call)
        allowed.url = server.url
        allowed.save_by(actor)

    def revoke(self, actor: Actor) -> None:
        self.delete_by(actor)
