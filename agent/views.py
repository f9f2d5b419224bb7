"""Settings pages: the terminal's "Allow always" prefixes and the MCP servers
(each user's own), and the model providers (the site's, for its staff)."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from agent import cgroups, providers
from agent.approvals import has_terminal_permission
from agent.forms import McpServerForm, ProviderForm
from agent.local_model import installed_models
from agent.mcp import client as mcp_tools
from agent.models import McpAllowedCall, McpServer, ModelProvider, TerminalAllowedPrefix
from agent.rules import PROGRAMS
from core.history import Actor
from core.htmx import HtmxHttpRequest, render_page
from core.ownership import get_owned_or_404


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


def staff_only(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Model providers are the site's: its staff sees and changes them (403 for others)."""

    @wraps(view)
    def check(request: HtmxHttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_staff:
            raise PermissionDenied("Only the site's staff manages model providers.")
        return view(request, *args, **kwargs)

    return check


def setup_model(request: HtmxHttpRequest) -> HttpResponse:
    """First run, second step (the first: the admin account, neotask_site.views):
    chat with the embedded model, or connect one (the Models page's form and Test,
    saved as the default)."""
    if not request.user.is_staff:
        raise PermissionDenied("Only the site's staff chooses its models.")
    form = ProviderForm(request.user, request.POST or None, initial={"is_default": True})
    if request.method == "POST" and form.is_valid():
        provider = form.save()
        messages.success(request, f"Chats now use {provider.name} · {provider.model_names[0]}.")
        return redirect("home")
    context = {
        "form": form,
        "provider": form.instance,
        "config_sets_endpoint": providers.config_sets_endpoint(),
        "config_label": providers.config_label(),
        "local_model": settings.NEOTASK["llm"]["local_model"],
    }
    status = 400 if form.errors else 200
    return render(request, "neotask_site/setup_model.html", context, status=status)


@staff_only
def model_providers(request: HtmxHttpRequest) -> HttpResponse:
    context = {
        "providers": ModelProvider.objects.prefetch_related("groups"),
        "config_sets_endpoint": providers.config_sets_endpoint(),
        "config_label": providers.config_label(),
        "llm": settings.NEOTASK["llm"],
        "default_key": providers.default_key(),
        "embedded_default": providers.is_embedded(providers.default_key()),
        "embedded_models": installed_models(settings.NEOTASK["llm"]),
        "ollama_models": providers.detect_ollama(),
        "ollama_url": providers.OLLAMA_URL,
    }
    return render_page(request, "agent/model_providers.html", context)


def suggested(request: HtmxHttpRequest) -> dict[str, str] | None:
    """The add form's values for a suggestion the Models page made (Ollama found
    on this machine): named, never taken from the link, so that nobody's link
    fills in a URL for a staff member to save."""
    if request.GET.get("suggest") != "ollama":
        return None
    models = providers.detect_ollama() or []
    return {"name": "Ollama", "base_url": providers.OLLAMA_URL, "offered_models": "\n".join(models)}


def local_next(request: HtmxHttpRequest, default: str) -> str:
    """`next` when it is a page of this site, else `default` (no open redirect)."""
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(
        target, {request.get_host()}, request.is_secure()
    ):
        return target
    return default


@staff_only
def model_provider_edit(request: HtmxHttpRequest, pk: int | None = None) -> HttpResponse:
    """Add a provider (pk None; `?suggest=ollama` fills it in) or edit one."""
    provider = get_object_or_404(ModelProvider, pk=pk) if pk is not None else ModelProvider()
    if request.method == "POST":
        form = ProviderForm(request.user, request.POST, instance=provider)
    else:
        initial = suggested(request) if pk is None else None
        form = ProviderForm(request.user, instance=provider, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            saved = form.save()
        except IntegrityError:  # the same name, saved at the same moment elsewhere
            form.add_error("name", "A provider of that name exists.")
        else:
            messages.success(request, f"Saved the provider “{saved.name}”. Test it below.")
            if form.key_forgotten:
                messages.warning(
                    request,
                    "Its base URL changed, so the stored API key was removed: a key goes "
                    "only where it was entered for. Enter it again if the new URL needs it.",
                )
            return redirect(local_next(request, reverse("model-providers")))
    status = 400 if form.is_bound else 200
    context = {"form": form, "provider": provider, "next": request.GET.get("next", "")}
    return render_page(request, "agent/model_provider_edit.html", context, status=status)


TESTED_FIELDS = ("base_url", "offered_models", "context_window")


@staff_only
@require_POST
def model_provider_test(request: HtmxHttpRequest) -> HttpResponse:
    """The Test button: one one-token request, with a saved provider (`provider`) or
    with the form's values before they are saved (the stored key stands in for an
    empty key field, only at the URL it was saved for). What happened is said by
    its status, never by what the server answered (agent.providers.try_endpoint)."""
    saved = None
    if request.POST.get("provider"):
        saved = get_object_or_404(ModelProvider, pk=request.POST["provider"])
    saved_url = saved.base_url if saved else None  # before the form writes its own on it
    if "base_url" in request.POST:  # the form's values, valid or not elsewhere (a name taken)
        form = ProviderForm(request.user, request.POST, instance=saved or ModelProvider())
        form.is_valid()
        problems = [str(e) for field in TESTED_FIELDS for e in form.errors.get(field, [])]
        if problems:
            trial = providers.Trial(False, " ".join(problems))
            return render(request, "agent/_provider_test.html", {"trial": trial})
        data = form.cleaned_data
        same_url = data["base_url"] == saved_url
        candidate = ModelProvider(
            name=request.POST.get("name", "").strip()[:100] or "the endpoint",
            base_url=data["base_url"],
            offered_models=data["offered_models"],
            context_window=data["context_window"],
            sealed_api_key=saved.sealed_api_key if same_url and saved else "",
            # Tried as the URL of whoever set it: the saved one's, or this user's.
            url_set_by=saved.url_set_by if same_url and saved else request.user,
        )
        key = data.get("api_key") or None  # None: the stored one
        endpoint = providers.provider_endpoint(candidate, candidate.model_names[0], api_key=key)
    elif saved is not None:
        endpoint = providers.provider_endpoint(saved, saved.model_names[0])
    else:
        raise Http404("Nothing to test")
    trial = providers.try_endpoint(endpoint)
    if saved is not None and "base_url" not in request.POST:
        saved.record_test(trial.passed, trial.message)
    return render(request, "agent/_provider_test.html", {"trial": trial, "provider": saved})


@staff_only
@require_POST
def model_provider_delete(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    provider = get_object_or_404(ModelProvider, pk=pk)
    provider.delete_by(request.user)
    if request.htmx:
        return HttpResponse("")  # the row goes
    messages.success(
        request, f"Removed the provider “{provider.name}”; its chats use the default model now."
    )
    return redirect("model-providers")


def mcp_servers(request: HtmxHttpRequest) -> HttpResponse:
    """The user's MCP servers; a POST adds one, once it has answered with its tools."""
    form = McpServerForm(request.user, request.POST if request.method == "POST" else None)
    if form.is_valid():
        data = form.cleaned_data
        try:
            server = mcp_tools.add_server(
                request.user,
                data["name"],
                data["url"],
                data["token"],
                for_everyone=data.get("for_everyone", False),
            )
        except mcp_tools.McpUnavailable as exc:
            form.add_error("url", str(exc))
        except IntegrityError:  # the same name, added at the same moment elsewhere
            form.add_error("name", "You have a server of that name.")
        else:
            messages.success(
                request, f"Added “{server.name}”: its tools are offered to your agent."
            )
            form = McpServerForm(request.user)
    context = {
        "servers": McpServer.objects.owned_by(request.user),
        "shared": mcp_tools.offered_to_everyone().exclude(owner=request.user).filter(enabled=True),
        "allowed_calls": McpAllowedCall.objects.owned_by(request.user).select_related("server"),
        "form": form,
    }
    status = 400 if form.errors else 200
    return render_page(request, "agent/mcp_servers.html", context, status=status)


@require_POST
def mcp_server_test(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    server = get_owned_or_404(McpServer, request.user, pk=pk)
    message = mcp_tools.test_server(server)
    if not request.htmx:
        messages.info(request, message)
        return redirect("mcp-servers")
    return render(request, "agent/_mcp_server_row.html", {"server": server, "tested": message})


@require_POST
def mcp_server_delete(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    server = get_owned_or_404(McpServer, request.user, pk=pk)
    server.delete_by(Actor.user(request.user))
    if request.htmx:
        return HttpResponse("")  # the row goes
    messages.success(request, f"Removed “{server.name}”; its tools are no longer offered.")
    return redirect("mcp-servers")


@require_POST
def mcp_call_revoke(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """That call asks for approval again next time."""
    allowed = get_owned_or_404(McpAllowedCall, request.user, pk=pk)
    allowed.revoke(Actor.user(request.user))
    if request.htmx:
        return HttpResponse("")  # the row goes
    messages.success(request, "Revoked: that call asks for your approval again.")
    return redirect("mcp-servers")
