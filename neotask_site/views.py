from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.auth import get_user_model, login
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.views import PasswordChangeView
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.shortcuts import redirect, render
from django.templatetags.static import static
from django.urls import reverse
from django.views.decorators.cache import cache_control, never_cache
from django.views.decorators.http import require_GET

from core.forms import (
    AdminAccountForm,
    HistoryFilterForm,
    NewUserForm,
    ThrottledPasswordChangeForm,
)
from core.htmx import HtmxHttpRequest, render_page
from core.models import Change
from neotask_site import first_run


@login_not_required
@never_cache
def setup(request: HttpRequest) -> HttpResponse:
    """First run: create the admin account. Gone once any account exists."""
    User = get_user_model()
    if User.objects.exists():
        return redirect("login")
    if not first_run.may_set_up(request):
        return render(request, "neotask_site/setup_refused.html", status=403)
    form = AdminAccountForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        with transaction.atomic():
            # Two browsers racing through first run: only the first one wins.
            if User.objects.exists():
                return redirect("login")
            user = form.save()
        first_run.discard_token()
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        return redirect("setup-model")
    token = request.POST.get("token") or request.GET.get("token") or ""
    return render(request, "neotask_site/setup.html", {"form": form, "token": token})


def add_user(request: HtmxHttpRequest) -> HttpResponse:
    """The site's staff adds an account, which can sign in at once (403 for others,
    as the Models page)."""
    if not request.user.is_staff:
        raise PermissionDenied("Only the site's staff adds users.")
    form = NewUserForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = form.save()
        role = "a staff member" if user.is_staff else "a user"
        messages.success(request, f"Added {user.get_username()} as {role}: they can sign in now.")
        return redirect("user-add")
    status = 400 if form.errors else 200
    return render(request, "neotask_site/add_user.html", {"form": form}, status=status)


class PasswordChange(PasswordChangeView):
    """Django's page, with the current password guarded by the login throttle."""

    form_class = ThrottledPasswordChangeForm

    def get_form_kwargs(self) -> dict[str, Any]:
        return {**super().get_form_kwargs(), "request": self.request}


def admin_password_change(request: HttpRequest) -> HttpResponseBase:
    """The admin's own page (AdminSite.password_change), with the same form."""
    view = PasswordChange.as_view(
        success_url=reverse("admin:password_change_done"),
        extra_context=admin.site.each_context(request),
    )
    return view(request)


THEME_COLOR = "#4f46e5"  # the accent of neotask.css and the icons


# Open to all: a browser fetches the manifest without the session cookie.
@login_not_required
@cache_control(max_age=3600)
@require_GET
def web_manifest(request: HttpRequest) -> JsonResponse:
    """What a phone needs to install the chat as an app."""
    manifest = {
        "name": "Neotask",
        "short_name": "Neotask",
        "description": "Chat with an AI agent whose memory persists.",
        "start_url": "/",
        "scope": "/",
        "display": "standalone",
        "background_color": "#f7f7f8",
        "theme_color": THEME_COLOR,
        "icons": [
            {
                "src": static(f"neotask/icon-{size}.png"),
                "sizes": f"{size}x{size}",
                "type": "image/png",
                # Drawn inside the safe zone, so one file serves as both.
                "purpose": "any maskable",
            }
            for size in (192, 512)
        ],
    }
    return JsonResponse(manifest, content_type="application/manifest+json")


HISTORY_PER_PAGE = 50


def history(request: HtmxHttpRequest) -> HttpResponse:
    """The owner's history of changes, newest first, filtered by what changed, who
    changed it and text; htmx gets only the results."""
    form = HistoryFilterForm(request.GET)
    changes = Change.objects.owned_by(request.user)
    status = 200
    if form.is_valid():
        data = form.cleaned_data
        changes = changes.matching(data["subject"], data["actor"], data["q"])
    else:  # an unknown filter: say so rather than show what it did not ask for
        changes, status = changes.none(), 400
    page = Paginator(changes, HISTORY_PER_PAGE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context = {"form": form, "page": page, "query": query.urlencode()}
    return render_page(request, "neotask_site/history.html", context, status=status)
