from __future__ import annotations

import hmac
from collections.abc import Callable
from functools import wraps

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from core import tokens
from health import checks as health
from health import metrics

# The text format every Prometheus reads (Neotask's names need no UTF-8 escaping).
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


@login_not_required
@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """200 when every part answers, else 503; the body names each part's state.
    `?live`: 200 when this process answers, nothing else checked (a liveness probe:
    a model or database that is down is no reason to restart the web server)."""
    if "live" in request.GET:
        return JsonResponse({"web": health.OK})
    checks = health.run_checks()
    status = 200 if all(state == health.OK for state in checks.values()) else 503
    return JsonResponse(checks, status=status)


def metrics_token(presented: str) -> bool | None:
    """core.tokens' check of Prometheus' bearer token ([server] metrics_token)."""
    token = settings.NEOTASK["server"]["metrics_token"].strip()
    return True if hmac.compare_digest(presented.encode(), token.encode()) else None


# For Prometheus, which has no login: one token, a setting, so a wrong one is a 403.
METRICS = "metrics"
tokens.register(METRICS, tokens.Scope(metrics_token, "A bearer token is needed.", 403))


def plain_refusal(refused: tokens.TokenRefused) -> HttpResponse:
    return HttpResponse(str(refused), status=refused.status, headers=refused.headers)


def metrics_on(view: Callable[[HttpRequest], HttpResponse]) -> Callable[..., HttpResponse]:
    """/metrics is not there at all (404) until a token is set."""

    @wraps(view)
    def checked(request: HttpRequest) -> HttpResponse:
        if not settings.NEOTASK["server"]["metrics_token"]:
            raise Http404("Metrics are off: set [server] metrics_token.")
        return view(request)

    return checked


@login_not_required
@never_cache
@require_GET
@metrics_on
@tokens.token_required(METRICS, plain_refusal)
def prometheus_metrics(request: HttpRequest) -> HttpResponse:
    return HttpResponse(metrics.exposition(), content_type=PROMETHEUS_TEXT)
