from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from memory.models import PINNED_IMPORTANCE, Event, Fact, Macro, MemoryChunk, MemoryFile
from neotask_site.admin import RecordedAdmin
from neotask_site.ownership import OwnedAdmin


class EmbeddingFilter(admin.SimpleListFilter):
    title = "embedding"
    parameter_name = "embedding"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list:
        return [("yes", "Embedded"), ("no", "Missing"), ("error", "Failed")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() == "yes":
            return queryset.filter(embedding__isnull=False)
        if self.value() == "no":
            return queryset.filter(embedding__isnull=True)
        if self.value() == "error":
            return queryset.filter(embedding_error__isnull=False)
        return queryset


@admin.register(Event)
class EventAdmin(OwnedAdmin):
    list_display = [
        "id",
        "created_at",
        "event_type",
        "short_text",
        "importance",
        "session_id",
        "owner",
        "embedded",
        "consolidated_at",
    ]
    list_filter = ["event_type", EmbeddingFilter, "consolidated_at", "created_at", "owner"]
    search_fields = ["text", "session_id", "tool_name", "=legacy_message_id"]
    list_editable = ["importance"]
    date_hierarchy = "created_at"
    readonly_fields = ["created_at", "consolidated_at", "embedding_error", "legacy_message_id"]
    exclude = ["embedding"]
    actions = ["pin", "unpin"]
    list_per_page = 50

    @admin.display(description="text")
    def short_text(self, event: Event) -> str:
        return event.text[:80] + ("…" if len(event.text) > 80 else "")

    @admin.display(boolean=True)
    def embedded(self, event: Event) -> bool:
        return event.has_embedding

    @admin.action(description="Pin (importance 1.0)")
    def pin(self, request: HttpRequest, queryset: QuerySet) -> None:
        queryset.update(importance=PINNED_IMPORTANCE)

    @admin.action(description="Unpin (importance 0.5)")
    def unpin(self, request: HttpRequest, queryset: QuerySet) -> None:
        queryset.update(importance=0.5)


@admin.register(Fact)
class FactAdmin(RecordedAdmin, OwnedAdmin):
    list_display = ["category", "key", "value", "source", "owner", "updated_at"]
    list_filter = ["category", "source", "owner"]
    search_fields = ["category", "key", "value"]
    list_editable = ["value"]
    readonly_fields = [
        "origin",
        "origin_event",
        "origin_session_id",
        "origin_label",
        "created_at",
        "updated_at",
    ]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if not change or "value" in form.changed_data:
            obj.origin, obj.origin_event = Fact.Origin.ADMIN, None
            obj.origin_session_id, obj.origin_label = "", request.user.get_username()
        super().save_model(request, obj, form, change)


@admin.register(Macro)
class MacroAdmin(OwnedAdmin):
    list_display = ["trigger_tool", "next_tool", "confidence", "used_count", "owner", "updated_at"]
    list_filter = ["trigger_tool", "next_tool", "owner"]
    search_fields = ["trigger_tool", "next_tool", "trigger_args_pattern"]
    readonly_fields = ["created_at", "updated_at"]


@admin.register(MemoryFile)
class MemoryFileAdmin(RecordedAdmin, OwnedAdmin):
    list_display = ["path", "agent", "size", "skip_reason", "indexed_at", "owner"]
    list_filter = ["agent", "indexed_at", "owner"]
    search_fields = ["path", "skip_reason"]
    readonly_fields = ["size", "mtime_ns", "sha256", "skip_reason", "indexed_at", "created_at"]


@admin.register(MemoryChunk)
class MemoryChunkAdmin(OwnedAdmin):
    """Chunks are derived from the files: read-only here, edited through the file."""

    list_display = ["file", "start_line", "end_line", "heading", "embedded", "owner"]
    list_select_related = ["owner", "file"]
    list_filter = ["agent", EmbeddingFilter, "owner"]
    search_fields = ["text", "heading", "file__path"]
    readonly_fields = [
        "file",
        "position",
        "start_line",
        "end_line",
        "content_hash",
        "embedding_error",
        "embedded_at",
        "created_at",
    ]
    exclude = ["embedding"]

    @admin.display(boolean=True)
    def embedded(self, chunk: MemoryChunk) -> bool:
        return chunk.embedding is not None
