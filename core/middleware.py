from __future__ import annotations

from collections.abc import Callable

from django.contrib.auth import get_user_model
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect

# Paths that work before the first account exists.
FIRST_RUN_OPEN_PATHS = ("/setup/", "/healthz", "/metrics", "/static/", "/manifest.webmanifest")


class FirstRunMiddleware:
    """Until an account exists, every page leads to "create the admin account"."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        # Once a user exists this stays true for the process: one query at most
        # per process instead of one per request.
        self.has_users = False

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not self.has_users and not request.path.startswith(FIRST_RUN_OPEN_PATHS):
            self.has_users = get_user_model().objects.exists()
            if not self.has_users:
                return redirect("setup")
        return self.get_response(request)


class RefuseNulMiddleware:
    """A NUL in the path or the query names nothing here, and PostgreSQL refuses
    it in a query (an admin lookup with it was a 500): 404 for the path, 400 for
    the query. Form fields refuse it themselves."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if "\x00" in request.path_info:
            raise Http404("No such page")
        if any("\x00" in "".join([key, *values]) for key, values in request.GET.lists()):
            return HttpResponseBadRequest("A URL cannot hold a NUL character.")
        return self.get_response(request)
