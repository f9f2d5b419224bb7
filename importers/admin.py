from django.contrib import admin
from django.http import HttpRequest

from core.ownership import OwnedAdmin
from importers.models import ExportJob, ImportedArchive, ImportJob


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
        "heartbeat_at",
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
        "heartbeat_at",
        "finished_at",
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(ImportedArchive)
class ImportedArchiveAdmin(OwnedAdmin):
    """Archives imported per user: deleting one lets its user import it again (after
    deleting what it added, say)."""

    list_display = ["label", "imported_at", "exported_at", "owner"]
    list_filter = ["owner"]
    search_fields = ["label", "digest"]
    readonly_fields = ["digest", "label", "exported_at", "imported_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
