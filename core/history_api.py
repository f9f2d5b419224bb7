"""The owner's history of changes in the JSON API (/api/v1/history/), on the
shared framework (core.api)."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse

from core.api import ApiError, ApiRequest, endpoint, paged
from core.forms import HistoryFilterForm
from core.models import Change


def change_dicts(changes: list[Change]) -> list[dict[str, Any]]:
    return [
        {
            "id": change.pk,
            "at": change.at.isoformat(),
            "actor": {"kind": change.actor_kind, "label": change.actor_label},
            "subject": {
                "kind": change.subject_kind,
                "id": change.subject_id,
                "label": change.subject_label,
            },
            "action": change.action,
            "old": change.old_value,
            "new": change.new_value,
        }
        for change in changes
    ]


def list_history(request: ApiRequest) -> HttpResponse:
    """The owner's history of changes, newest first, filtered as the History page
    filters it (?subject=, ?actor=, ?q=)."""
    form = HistoryFilterForm(request.GET)
    if not form.is_valid():
        problems = "; ".join(
            f"'{name}': {' '.join(str(error) for error in errors)}"
            for name, errors in form.errors.items()
        )
        raise ApiError(400, f"Bad filter: {problems}")
    data = form.cleaned_data
    changes = Change.objects.owned_by(request.user).matching(
        data["subject"], data["actor"], data["q"]
    )
    return paged(request, "changes", changes, change_dicts)


history_view = endpoint(GET=list_history)
