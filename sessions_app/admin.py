from typing import Any

from django.contrib import admin
from django.contrib.auth.admin import GroupAdmin
from django.contrib.auth.models import Group
from django.http import HttpRequest

from core.admin import RecordedAdmin
from core.ownership import OwnedAdmin
from memory.workspace import validate_agent_name
from sessions_app.models import (
    Agent,
    ApiToken,
    ChatClaim,
    ChatInput,
    DailyUsage,
    GroupQuota,
    Session,
)


@admin.register(Agent)
class AgentAdmin(OwnedAdmin):
    list_display = ["name", "owner", "created_at", "updated_at"]
    list_filter = ["owner"]
    search_fields = ["name", "system_prompt"]
    readonly_fields = ["created_at", "updated_at"]

    def formfield_for_dbfield(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        # The whole rule, before the model's shorter message.
        if field is not None and db_field.name == "name":
            field.validators.append(validate_agent_name)
        return field


@admin.register(Session)
class SessionAdmin(OwnedAdmin):
    list_display = [
        "key",
        "title",
        "status",
        "agent",
        "owner",
        "input_tokens",
        "output_tokens",
        "last_activity_at",
    ]
    # Agents of the sessions shown: a filter on agent__name would list everyone's agents.
    list_filter = ["status", "channel", ("agent", admin.RelatedOnlyFieldListFilter), "owner"]
    search_fields = ["key", "title", "=id"]
    list_select_related = ["owner", "agent"]
    autocomplete_fields = ["owner", "agent", "continues_from"]
    readonly_fields = ["id", "created_at", "updated_at", "last_activity_at"]
    date_hierarchy = "last_activity_at"


@admin.register(ApiToken)
class ApiTokenAdmin(RecordedAdmin, OwnedAdmin):
    # Tokens are issued in the UI, where the secret is shown once; the admin only
    # lists and revokes them.
    list_display = ["name", "prefix", "owner", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["owner"]
    search_fields = ["name", "prefix"]
    fields = ["owner", "name", "prefix", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = ["owner", "prefix", "created_at", "last_used_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(ChatInput)
class ChatInputAdmin(OwnedAdmin):
    # What waits in each chat: visible for a stuck queue, and removable; written
    # only by the chat itself.
    list_display = ["key", "kind", "status", "owner", "created_at"]
    list_filter = ["status", "kind", "owner"]
    search_fields = ["key", "text"]
    readonly_fields = [f.name for f in ChatInput._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(ChatClaim)
class ChatClaimAdmin(OwnedAdmin):
    # Which process runs each chat now; the lease frees a crashed one by itself.
    list_display = ["key", "owner", "lease_until"]
    list_filter = ["owner"]
    search_fields = ["key"]
    readonly_fields = [f.name for f in ChatClaim._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(DailyUsage)
class DailyUsageAdmin(OwnedAdmin):
    """Usage by day: kept by the chat itself (sessions_app.quotas). Read-only;
    deleting a row gives its user that day's quota back."""

    list_display = ["day", "owner", "messages", "tokens", "reserved"]
    list_filter = ["day", "owner"]
    search_fields = ["owner__username"]
    date_hierarchy = "day"
    readonly_fields = [f.name for f in DailyUsage._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


class GroupQuotaInline(admin.StackedInline):
    model = GroupQuota
    can_delete = True
    verbose_name = "quota"
    verbose_name_plural = "quota (instead of the [quotas] defaults; 0 = no limit)"


# Quotas are set on the group they apply to.
admin.site.unregister(Group)


@admin.register(Group)
class GroupWithQuotaAdmin(GroupAdmin):
    inlines = [GroupQuotaInline]
