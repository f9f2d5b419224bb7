from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from agent.admin import TerminalTrustAdmin
from core.admin import RecordedAdmin
from scheduler.models import ScheduledTask


@admin.register(ScheduledTask)
class ScheduledTaskAdmin(RecordedAdmin, TerminalTrustAdmin):
    list_display = [
        "name",
        "original_schedule",
        "cron_expr",
        "next_run_at",
        "last_run_at",
        "is_paused",
        "is_trusted",
        "is_oneshot",
        "source",
        "owner",
    ]
    list_filter = ["is_paused", "is_trusted", "is_oneshot", "source", "owner"]
    search_fields = ["name", "prompt", "original_schedule", "cron_expr"]
    readonly_fields = ["id", "created_at", "updated_at", "last_run_at"]
    trust_fields = ["is_trusted"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        readonly = list(super().get_readonly_fields(request, obj))
        if obj is not None and "is_trusted" in readonly:  # no terminal permission
            readonly += [name for name in obj.trust_fields() if name not in readonly]
        return readonly
