from django.contrib import admin

from neotask_site.ownership import OwnedAdmin
from scheduler.models import ScheduledTask


@admin.register(ScheduledTask)
class ScheduledTaskAdmin(OwnedAdmin):
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
