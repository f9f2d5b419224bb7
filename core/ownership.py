"""The one mechanism that scopes user data to its owner.

Every model holding user data inherits `OwnedModel`; every queryset that
serves a request goes through `owned_by(user)` or `get_owned_or_404`, never a
hand-written `filter(owner=...)` in a view.
"""

from __future__ import annotations

from typing import Any, Self, TypeAlias, TypeVar, cast

from django import forms
from django.conf import settings
from django.contrib import admin
from django.contrib.auth.models import AnonymousUser, User
from django.db import models
from django.http import HttpRequest
from django.shortcuts import get_object_or_404

M = TypeVar("M", bound=models.Model)

# Whom a row belongs to: a user, never an id (functions handed only the id take
# `owner_id: int`). Neotask keeps Django's user model (AUTH_USER_MODEL is not
# swapped), which is also what django-stubs resolves request.user to.
Owner: TypeAlias = User
# Who asks: a request's user, signed in or not, or nobody.
Visitor: TypeAlias = User | AnonymousUser | None


class OwnedQuerySet(models.QuerySet):
    def owned_by(self, user: Visitor) -> Self:
        """Rows of `user`; nothing at all for an anonymous or missing user."""
        if user is None or not getattr(user, "is_authenticated", False):
            return self.none()
        return self.filter(owner=user)


class OwnedModel(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)

    objects = OwnedQuerySet.as_manager()

    class Meta:
        abstract = True


def get_owned_or_404(model: type[M] | models.QuerySet[M], user: Visitor, **lookups: Any) -> M:
    """The row matching `lookups` if `user` owns it; 404 otherwise (never 403,
    so a guessed id does not reveal that someone else's row exists)."""
    queryset = model if isinstance(model, models.QuerySet) else model._default_manager.all()
    return get_object_or_404(cast(OwnedQuerySet, queryset).owned_by(user), **lookups)


class OwnedAdminForm(forms.ModelForm):
    """A row may point only at rows of its own owner: a forged id (or a
    superuser's slip) in a foreign key is a form error, not a link across users."""

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data
        owner = cleaned.get("owner") or getattr(self.instance, "owner", None)
        if owner is None:  # the owner field has its own error
            return cleaned
        for name in self.fields:
            value = cleaned.get(name)
            if name != "owner" and isinstance(value, OwnedModel) and value.owner_id != owner.pk:
                self.add_error(name, f"Choose one of {owner}'s own; this one is someone else's.")
        return cleaned


class OwnedAdmin(admin.ModelAdmin):
    """Superusers curate everyone's rows; other staff see and edit their own."""

    form = OwnedAdminForm
    list_select_related = ["owner"]
    autocomplete_fields = ["owner"]

    def get_queryset(self, request: HttpRequest) -> models.QuerySet:
        queryset = super().get_queryset(request)
        if request.user.is_superuser:
            return queryset
        return cast(OwnedQuerySet, queryset).owned_by(request.user)

    def get_list_filter(self, request: HttpRequest) -> Any:
        # Django's owner filter lists every account; this one only the owners of
        # rows the user may see.
        return [
            ("owner", admin.RelatedOnlyFieldListFilter) if spec == "owner" else spec
            for spec in super().get_list_filter(request)
        ]

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        return {"owner": request.user.pk, **super().get_changeform_initial_data(request)}

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        # Non-superusers may only file rows under themselves, pointing at their own rows.
        related = db_field.related_model
        if not request.user.is_superuser:
            if db_field.name == "owner":
                kwargs["queryset"] = related.objects.filter(pk=request.user.pk)
            elif issubclass(related, OwnedModel):
                kwargs["queryset"] = related._default_manager.owned_by(request.user)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)
