"""Pages that answer htmx with only the part it swaps.

django-htmx's "swapping the base template": a page template starts with
`{% extends base_template %}`. A plain request gets it inside base.html, the
whole page; an htmx request gets it inside _partial.html, which renders only
the page's `partial` block. That block is the part of the page that htmx
replaces (nested in `content`), or, for a form shown in place of a table row,
the row that stands in for the page (beside `content`).
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django_htmx.middleware import HtmxDetails

from core.ownership import Owner

FULL_BASE = "base.html"
PARTIAL_BASE = "_partial.html"


class HtmxHttpRequest(HttpRequest):
    """A page's request as the type checker should see it (django-htmx's recipe):
    its middleware has set `htmx`, and LoginRequiredMiddleware lets only a
    signed-in user reach a page (the views marked login_not_required take a
    plain HttpRequest)."""

    htmx: HtmxDetails
    user: Owner


def render_page(
    request: HtmxHttpRequest,
    template_name: str,
    context: dict[str, Any] | None = None,
    status: int | None = None,
) -> HttpResponse:
    base_template = PARTIAL_BASE if request.htmx else FULL_BASE
    return render(
        request, template_name, {**(context or {}), "base_template": base_template}, status=status
    )
