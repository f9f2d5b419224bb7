from django.contrib import admin
from django.http import HttpRequest

from importers.models import ExportJob, ImportJob
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


@admin.register(ExportJob)
class ExportJobAdmin(OwnedAdmin):
    """Read only: an export is made by its job, for its owner (the Your data page)."""

    list_display = ["created_at", "status", "filename", "size", "owner"]
    list_filter = ["status", "owner"]
    search_fields = ["filename", "error"]
    readonly_fields = [
        "id",
        "status",
        "progress_done",
        "progress_total",
        "filename",
        "size",
        "counts",
        "error",
        "created_at",
        "started_at",
        "finished_at",
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
