from django.contrib import admin

from importers.models import ImportJob
from neotask_site.ownership import OwnedAdmin


@admin.register(ImportJob)
class ImportJobAdmin(OwnedAdmin):
    list_display = ["filename", "kind", "status", "agent", "dry_run", "created_at", "owner"]
    list_filter = ["kind", "status", "dry_run", "owner"]
    search_fields = ["filename", "agent", "error"]
    readonly_fields = [
        "id",
        "progress_done",
        "progress_total",
        "report",
        "error",
        "created_at",
        "started_at",
        "finished_at",
    ]
