from django.contrib import admin

from agent.models import ApprovalRequest, TerminalAllowedPrefix
from neotask_site.ownership import OwnedAdmin


@admin.register(TerminalAllowedPrefix)
class TerminalAllowedPrefixAdmin(OwnedAdmin):
    list_display = ["prefix", "owner", "created_at"]
    list_filter = ["owner"]
    search_fields = ["prefix"]
    readonly_fields = ["created_at"]


@admin.register(ApprovalRequest)
class ApprovalRequestAdmin(OwnedAdmin):
    list_display = ["command", "status", "decision", "owner", "created_at", "decided_at"]
    list_filter = ["status", "decision", "owner"]
    search_fields = ["command", "session_id"]
    readonly_fields = ["id", "created_at", "decided_at"]
