"""The terminal's "Allow always" prefixes: list, switch on, revoke."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from agent import cgroups
from agent.approvals import has_terminal_permission
from agent.models import TerminalAllowedPrefix
from agent.rules import PROGRAMS
from neotask_site.history import Actor
from neotask_site.htmx import HtmxHttpRequest, render_page
from neotask_site.ownership import get_owned_or_404


def terminal_prefixes(request: HtmxHttpRequest) -> HttpResponse:
    terminal = settings.NEOTASK["terminal"]
    context = {
        "prefixes": TerminalAllowedPrefix.objects.owned_by(request.user),
        "can_use_terminal": has_terminal_permission(request.user),
        "terminal": terminal,
        "programs": PROGRAMS,
        # Which limits bind the sandbox as a whole on this machine (agent.cgroups).
        "limits": cgroups.in_force().describe(terminal["memory_mb"], terminal["max_processes"]),
    }
    return render_page(request, "agent/terminal.html", context)


@require_POST
def activate_prefix(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Switch on a prefix that is off (imported, or switched off by an upgrade):
    only its owner, holding the terminal permission, grants that trust, and only
    for a rule the allow-list allows."""
    prefix = get_owned_or_404(TerminalAllowedPrefix, request.user, pk=pk)
    if not has_terminal_permission(request.user):
        messages.error(request, "Switching on a prefix needs the terminal permission.")
        return redirect("terminal-prefixes")
    if problem := prefix.problem:
        messages.error(request, f"“{prefix.prefix}” stays off: {problem}.")
        return redirect("terminal-prefixes")
    prefix.switch_on(Actor.user(request.user))
    messages.success(request, f"“{prefix.prefix}” is on: those commands run without asking.")
    return redirect("terminal-prefixes")


@require_POST
def revoke_prefix(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """From now on commands with this prefix ask again before they run."""
    prefix = get_owned_or_404(TerminalAllowedPrefix, request.user, pk=pk)
    prefix.revoke(Actor.user(request.user))
    if request.htmx:
        return HttpResponse("")  # swaps the row for nothing
    messages.success(request, f"Revoked “{prefix.prefix}”: those commands ask again.")
    return redirect("terminal-prefixes")
