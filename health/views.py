from __future__ import annotations

import hmac

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from health import checks as health
from health import metrics

# The text format every Prometheus reads (Neotask's names need no UTF-8 escaping).
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


@login_not_required
@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """200 when every part answers, else 503; the body names each part's state."""
    checks = health.run_checks()
    status = 200 if all(state == health.OK for state in checks.values()) else 503
    return JsonResponse(checks, status=status)


# For Prometheus, which has no login: its bearer token ([server] metrics_token).
@login_not_required
@never_cache
@require_GET
def prometheus_metrics(request: HttpRequest) -> HttpResponse:
    token = settings.NEOTASK["server"]["metrics_token"]
    if not token:
        raise Http404("Metrics are off: set [server] metrics_token.")
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not given:
        return HttpResponse(
            "A bearer token is needed.", status=401, headers={"WWW-Authenticate": "Bearer"}
        )
    if not hmac.compare_digest(given.strip().encode(), token.strip().encode()):
        return HttpResponse("Wrong token.", status=403)
    return HttpResponse(metrics.exposition(), content_type=PROMETHEUS_TEXT)
