from __future__ import annotations

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from memory.models import Event
from neotask_site.ownership import get_owned_or_404
from sessions_app.models import Session

EVENTS_PER_PAGE = 100


def home(request: HttpRequest) -> HttpResponse:
    sessions = Session.objects.owned_by(request.user).select_related("agent")[:100]
    return render(request, "sessions_app/home.html", {"sessions": sessions})


def session_detail(request: HttpRequest, pk: str) -> HttpResponse:
    session = get_owned_or_404(Session, request.user, pk=pk)
    events = Event.objects.owned_by(request.user).filter(session_id=str(session.pk))
    page = Paginator(events, EVENTS_PER_PAGE).get_page(request.GET.get("page"))
    return render(request, "sessions_app/session_detail.html", {"session": session, "page": page})
