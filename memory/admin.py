from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from core.admin import RecordedAdmin
from core.history import Actor
from core.ownership import OwnedAdmin
from memory import forgetting
from memory.files.paths import MemoryPathError
from memory.models import (
    PINNED_IMPORTANCE,
    Event,
    Fact,
    ForgottenEvent,
    Macro,
    MemoryChunk,
    MemoryFile,
)


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


def by_owner(rows: QuerySet) -> dict[int, list]:
    """The rows of each owner: memory.forgetting deletes one owner's at a time."""
    owners: dict[int, list] = {}
    for row in rows.select_related("owner"):
        owners.setdefault(row.owner_id, []).append(row)
    return owners


class ForgettingAdmin(OwnedAdmin):
    """Deleting here (a row's page or the "delete selected" action, each after
    Django's confirmation page) takes the path the chat page and the API take:
    memory.forgetting, so that no process keeps what the admin deleted."""

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        self.forget(request, [obj])

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        for rows in by_owner(queryset).values():
            self.forget(request, rows)

    def forget(self, request: HttpRequest, rows: list) -> None:
        raise NotImplementedError


@admin.register(Event)
class EventAdmin(ForgettingAdmin):
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
    list_filter = [
        "event_type",
        EmbeddingFilter,
        "imported_from",
        "consolidated_at",
        "created_at",
        "owner",
    ]
    search_fields = ["text", "session_id", "tool_name", "=legacy_message_id"]
    list_editable = ["importance"]
    date_hierarchy = "created_at"
    readonly_fields = [
        "created_at",
        "consolidated_at",
        "embedding_error",
        "legacy_message_id",
        "imported_from",
    ]
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

    def forget(self, request: HttpRequest, rows: list) -> None:
        owner, actor = rows[0].owner, Actor.admin(request.user)
        forgetting.forget_events(owner, [event.pk for event in rows], actor)


@admin.register(Fact)
class FactAdmin(ForgettingAdmin, RecordedAdmin):
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

    def forget(self, request: HttpRequest, rows: list) -> None:
        facts = Fact.objects.filter(pk__in=[fact.pk for fact in rows])
        forgetting.forget_facts(rows[0].owner, facts, Actor.admin(request.user))


@admin.register(Macro)
class MacroAdmin(OwnedAdmin):
    list_display = ["trigger_tool", "next_tool", "confidence", "used_count", "owner", "updated_at"]
    list_filter = ["trigger_tool", "next_tool", "owner"]
    search_fields = ["trigger_tool", "next_tool", "trigger_args_pattern"]
    readonly_fields = ["created_at", "updated_at"]


@admin.register(MemoryFile)
class MemoryFileAdmin(ForgettingAdmin, RecordedAdmin):
    """Deleting a file here deletes it in the workspace too: otherwise the next
    indexing would bring it back."""

    list_display = ["path", "agent", "size", "skip_reason", "indexed_at", "owner"]
    list_filter = ["agent", "indexed_at", "owner"]
    search_fields = ["path", "skip_reason"]
    readonly_fields = ["size", "mtime_ns", "sha256", "skip_reason", "indexed_at", "created_at"]

    def forget(self, request: HttpRequest, rows: list) -> None:
        for file in rows:
            try:
                actor = Actor.admin(request.user)
                forgetting.forget_memory_file(file.owner, file.agent, file.path, actor)
            except MemoryPathError as exc:  # a link, or gone already: the row is gone anyway
                self.message_user(request, f"{file.path}: {exc}", messages.WARNING)


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


@admin.register(ForgottenEvent)
class ForgottenEventAdmin(OwnedAdmin):
    """Which events were deleted on demand, and when (ids only): the log every
    process's vector index reads. Written by memory.forgetting alone."""

    list_display = ["event_id", "agent", "forgotten_at", "owner"]
    list_filter = ["agent", "forgotten_at", "owner"]
    readonly_fields = ["owner", "agent", "event_id", "forgotten_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
