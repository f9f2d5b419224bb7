from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from agent.approvals import PERMISSION
from agent.models import ApprovalRequest, McpAllowedCall, McpServer, TerminalAllowedPrefix
from core.admin import RecordedAdmin
from core.ownership import OwnedAdmin, OwnedAdminForm


class TerminalTrustAdmin(OwnedAdmin):
    """Fields that let terminal commands run unasked change only in the hands
    of staff holding the terminal permission, not with model permissions alone."""

    trust_fields: list[str] = []

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        readonly = list(super().get_readonly_fields(request, obj))
        if not request.user.has_perm(PERMISSION):
            readonly += [name for name in self.trust_fields if name not in readonly]
        return readonly


@admin.register(TerminalAllowedPrefix)
class TerminalAllowedPrefixAdmin(RecordedAdmin, TerminalTrustAdmin):
    list_display = ["prefix", "active", "owner", "created_at"]
    list_filter = ["active", "owner"]
    search_fields = ["prefix"]
    readonly_fields = ["created_at", "switched_off_because"]
    trust_fields = ["prefix", "active"]

    # A new prefix is trust in itself.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return super().has_add_permission(request) and request.user.has_perm(PERMISSION)


@admin.register(ApprovalRequest)
class ApprovalRequestAdmin(TerminalTrustAdmin):
    list_display = ["command", "status", "decision", "owner", "created_at", "decided_at"]
    list_filter = ["status", "decision", "owner"]
    search_fields = ["command", "session_id"]
    readonly_fields = ["id", "created_at", "decided_at"]
    trust_fields = ["status", "decision", "command", "prefix"]


class McpServerAdminForm(OwnedAdminForm):
    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        owner = cleaned.get("owner") or getattr(self.instance, "owner", None)
        if cleaned.get("for_everyone") and owner is not None and not owner.is_superuser:
            # It would not be offered (agent.mcp.client.offered_to_everyone): its token is
            # a user's own, theirs to lend or not.
            self.add_error("for_everyone", "Only a superuser's server can be offered to everyone.")
        return cleaned


@admin.register(McpServer)
class McpServerAdmin(RecordedAdmin, OwnedAdmin):
    """Staff may switch a server off or remove it; its owner adds it on the MCP page,
    where it must answer with its tools and its token is sealed. Only a superuser
    offers one to everyone."""

    form = McpServerAdminForm
    list_display = ["name", "url", "enabled", "for_everyone", "owner", "listed_at"]
    list_filter = ["enabled", "for_everyone"]
    search_fields = ["name", "url"]
    fields = [
        "owner",
        "name",
        "url",
        "enabled",
        "for_everyone",
        "token_hint",
        "tools",
        "listed_at",
        "created_at",
    ]
    readonly_fields = ["owner", "name", "url", "token_hint", "tools", "listed_at", "created_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        readonly = list(super().get_readonly_fields(request, obj))
        return readonly if request.user.is_superuser else [*readonly, "for_everyone"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(McpAllowedCall)
class McpAllowedCallAdmin(RecordedAdmin, OwnedAdmin):
    """Staff may revoke a remembered call; only its owner's click remembers one."""

    list_display = ["call", "server", "owner", "created_at"]
    list_filter = ["owner"]
    search_fields = ["call"]
    readonly_fields = ["owner", "server", "url", "call", "created_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
