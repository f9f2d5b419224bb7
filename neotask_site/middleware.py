from __future__ import annotations

from collections.abc import Callable

from django.contrib.auth import get_user_model
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

# Paths that work before the first account exists.
FIRST_RUN_OPEN_PATHS = ("/setup/", "/healthz", "/static/")


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
