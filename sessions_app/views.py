from __future__ import annotations

import uuid

from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from agent.models import ApprovalRequest
from memory.models import Event, default_importance
from neotask_site.ownership import get_owned_or_404
from sessions_app import chat
from sessions_app.models import Session

EVENTS_PER_PAGE = 100
PINNED = 1.0
CHAT_EVENTS = 200


def chat_home(request: HttpRequest) -> HttpResponse:
    session = chat.latest_chat(request.user) or chat.start_chat(request.user)
    return redirect("chat", key=session.key)


@require_POST
def new_chat(request: HttpRequest) -> HttpResponse:
    return redirect("chat", key=chat.start_chat(request.user).key)


def open_chat(request: HttpRequest, key: str) -> Session:
    try:
        return chat.find_chat(request.user, key)
    except chat.ChatError:
        raise Http404("No such chat") from None


def session_events(session: Session, after: int = 0, limit: int = CHAT_EVENTS) -> list[Event]:
    events = Event.objects.owned_by(session.owner).filter(session_id=str(session.pk), id__gt=after)
    return list(reversed(events.order_by("-created_at", "-id")[:limit]))


def chat_page(request: HttpRequest, key: str) -> HttpResponse:
    session = open_chat(request, key)
    context = {
        "session": session,
        "events": session_events(session),
        "chats": chat.sidebar_chats(request.user),
        "meter": chat.meter(session),
        "approvals": ApprovalRequest.objects.owned_by(request.user).filter(
            session_id=str(session.pk), status=ApprovalRequest.Status.PENDING
        ),
    }
    return render(request, "sessions_app/chat.html", context)


def chat_events(request: HttpRequest, key: str) -> HttpResponse:
    """Events after `?after=<id>`: what a reconnecting page missed."""
    session = open_chat(request, key)
    try:
        after = int(request.GET.get("after", 0))
    except ValueError:
        after = 0
    events = session_events(session, after=after)
    return render(request, "sessions_app/_events.html", {"events": events})


def sidebar(request: HttpRequest) -> HttpResponse:
    current = request.GET.get("current", "")
    return render(
        request,
        "sessions_app/_sidebar.html",
        {"chats": chat.sidebar_chats(request.user), "current_key": current},
    )


def session_list(request: HttpRequest) -> HttpResponse:
    sessions = Session.objects.owned_by(request.user).select_related("agent")[:200]
    return render(request, "sessions_app/home.html", {"sessions": sessions})


def session_detail(request: HttpRequest, pk: str) -> HttpResponse:
    try:
        uuid.UUID(pk)
    except ValueError:
        raise Http404("No such session") from None
    session = get_owned_or_404(Session, request.user, pk=pk)
    events = Event.objects.owned_by(request.user).filter(session_id=str(session.pk))
    page = Paginator(events, EVENTS_PER_PAGE).get_page(request.GET.get("page"))
    return render(request, "sessions_app/session_detail.html", {"session": session, "page": page})


@require_POST
def event_pin(request: HttpRequest, pk: int) -> HttpResponse:
    """Pin a message (importance 1.0: always recalled) or unpin it (its default)."""
    event = get_owned_or_404(Event, request.user, pk=pk)
    pinned = event.importance >= PINNED
    event.importance = default_importance(event.event_type) if pinned else PINNED
    event.save(update_fields=["importance"])
    return render(request, "sessions_app/_event.html", {"event": event})
