from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from core.history import Actor
from core.models import Change, SignOnLink
from core.ownership import OwnedAdmin


class RecordedAdmin(admin.ModelAdmin):
    """For `Recorded` models: saves and deletions in the admin (forms, the list's
    inline edits, the delete action) take the model's recorded path, naming the
    admin user."""

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        obj.save_by(Actor.admin(request.user))

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        obj.delete_by(Actor.admin(request.user))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        actor = Actor.admin(request.user)
        for obj in queryset:
            obj.delete_by(actor)


@admin.register(Change)
class ChangeAdmin(OwnedAdmin):
    """The history, read by anyone with the view permission (their own, or
    everyone's for a superuser), edited by nobody."""

    list_display = ["at", "owner", "actor", "subject_kind", "subject_label", "action"]
    list_filter = ["subject_kind", "actor_kind", "action", "at", "owner"]
    search_fields = ["subject_label", "actor_label", "subject_id"]
    date_hierarchy = "at"
    list_per_page = 50

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(SignOnLink)
class SignOnLinkAdmin(OwnedAdmin):
    """Which provider account signs in to which account. Made only by a sign-in;
    deleting one lets the next sign-in link the account by its username again
    (e.g. after the person's provider account was recreated)."""

    list_display = ["owner", "issuer", "subject", "created_at"]
    search_fields = ["owner__username", "subject"]
    readonly_fields = ["owner", "issuer", "subject", "created_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
