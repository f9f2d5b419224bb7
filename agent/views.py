"""The terminal's "Allow always" prefixes: list and revoke."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from agent.models import TerminalAllowedPrefix
from neotask_site.ownership import get_owned_or_404


def terminal_prefixes(request: HttpRequest) -> HttpResponse:
    prefixes = TerminalAllowedPrefix.objects.owned_by(request.user)
    template = "agent/_prefix_rows.html" if request.htmx else "agent/terminal.html"
    return render(request, template, {"prefixes": prefixes})


@require_POST
def revoke_prefix(request: HttpRequest, pk: int) -> HttpResponse:
    """From now on commands with this prefix ask again before they run."""
    prefix = get_owned_or_404(TerminalAllowedPrefix, request.user, pk=pk)
    prefix.delete()
    if request.htmx:
        return HttpResponse("")  # swaps the row for nothing
    messages.success(request, f"Revoked “{prefix.prefix}”: those commands ask again.")
    return redirect("terminal-prefixes")
