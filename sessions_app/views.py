from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

from django.contrib import messages
from django.core.handlers.asgi import ASGIRequest
from django.core.paginator import Paginator
from django.db import IntegrityError, transaction
from django.db.models import Count, Q
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from agent import providers
from agent.approvals import ApprovalError
from agent.forms import ChatModelForm
from agent.local_model import fallback_notice
from agent.models import ApprovalRequest
from agent.prompt import superseded
from core.history import Actor
from core.htmx import HtmxHttpRequest, render_page
from core.ownership import get_owned_or_404
from memory import documents, undo
from memory.documents import AddedDocument
from memory.forgetting import NothingToForget
from memory.models import Event
from memory.recall import name_recalled_chats
from sessions_app import chat, chat_deletion, cleanup, transcripts
from sessions_app.agents import RenameError, rename_agent
from sessions_app.forms import (
    AgentNameForm,
    AgentPromptForm,
    ApiTokenForm,
    ChatTitleForm,
    NewAgentForm,
)
from sessions_app.meter import meter
from sessions_app.models import Agent, ApiToken, ChatInput, Session
from sessions_app.runner import answer_approval

EVENTS_PER_PAGE = 100
CHAT_EVENTS = 200


def chat_home(request: HtmxHttpRequest) -> HttpResponse:
    """The latest chat; without one, a chat not started yet: its message box,
    whose first message starts it (a GET creates nothing)."""
    session = chat.latest_chat(request.user)
    if session is None:
        return render(request, "sessions_app/start.html", {"agents": own_agents(request)})
    return redirect("chat", key=session.key)


def own_agents(request: HtmxHttpRequest) -> list[Agent]:
    return list(Agent.objects.owned_by(request.user))


@require_POST
def new_chat(request: HtmxHttpRequest) -> HttpResponse:
    """A chat with the agent chosen in the form (`agent`, an id), else the default one."""
    agent = None
    if request.POST.get("agent"):
        try:
            agent_id = int(request.POST["agent"])
        except ValueError:
            raise Http404("No such agent") from None
        agent = get_owned_or_404(Agent, request.user, pk=agent_id)
    return redirect("chat", key=chat.start_chat(request.user, agent).key)


def open_chat(request: HtmxHttpRequest, key: str) -> Session:
    try:
        return chat.find_chat(request.user, key)
    except chat.ChatError:
        raise Http404("No such chat") from None


def session_events(session: Session, after: int = 0, limit: int = CHAT_EVENTS) -> list[Event]:
    """The events to show, those of a branch a retry or an edit replaced marked
    (`replaced`, _event.html): "edited" for the message edited, else "earlier"."""
    events = Event.objects.owned_by(session.owner).filter(session_id=str(session.pk), id__gt=after)
    shown = list(reversed(events.order_by("-created_at", "-id")[:limit]))
    replaced = superseded(shown)
    for event in shown:
        if (by := replaced.get(event.pk)) is not None:
            edited = by.data.get("edited") and by.data.get("retry_of") == event.pk
            event.replaced = "edited" if edited else "earlier"
    name_recalled_chats(shown)
    return shown


def with_added_documents(session: Session, events: list[Event]) -> list[Event | AddedDocument]:
    """The events with the notes of the documents added from this chat's paperclip, each
    at its time (the live note's place); when only the latest events are shown, the
    notes from before them are left out too."""
    added = documents.added_in(session.owner, str(session.pk))
    if len(events) >= CHAT_EVENTS:
        added = [document for document in added if document.created_at >= events[0].created_at]
    # A stable sort: the events keep their order (by time, then id) among themselves.
    return sorted([*events, *added], key=lambda item: item.created_at)


def chat_page(request: HtmxHttpRequest, key: str) -> HttpResponse:
    session = open_chat(request, key)
    context = {
        "session": session,
        "events": with_added_documents(session, session_events(session)),
        # ?q=: the chat list's search, sent as a plain form without JavaScript.
        "chats": chat.sidebar_chats(request.user, query=request.GET.get("q", "")),
        "query": request.GET.get("q", ""),
        "agents": own_agents(request),
        "meter": meter(session).as_dict(),
        "approvals": ApprovalRequest.objects.owned_by(request.user).filter(
            session_id=str(session.pk), status=ApprovalRequest.Status.PENDING
        ),
        "queued": ChatInput.objects.owned_by(request.user).filter(
            key=key, status=ChatInput.Status.QUEUED
        ),
        "model_notice": fallback_notice(),
        "model_form": chat_model_form(session),
        "paperclip_chat": documents.chat_voucher(request.user, str(session.pk)),
    }
    return render(request, "sessions_app/chat.html", context)


def chat_model_form(session: Session, data: Any = None) -> ChatModelForm:
    """The picker: each model the owner can use now once, its agent's default marked."""
    default = providers.effective_key(session.owner, session.agent.model)
    form = ChatModelForm(session.owner, default, data)
    field = form.fields["model"]
    form.initial["model"] = field.initial_for(session.owner, session.model)  # type: ignore[attr-defined]
    return form


@require_POST
def chat_model(request: HtmxHttpRequest, key: str) -> HttpResponse:
    """The chat header's model picker: the chat's next turns use the model chosen
    (one the user may use; "" for the agent's default)."""
    session = open_chat(request, key)
    form = chat_model_form(session, request.POST)
    if form.is_valid():
        session = chat.choose_model(request.user, key, form.cleaned_data["model"])
        form = chat_model_form(session)
        if not request.htmx:
            messages.success(request, "The chat's model is changed.")
            return redirect("chat", key=key)
    elif not request.htmx:
        messages.error(request, " ".join(map(str, form.errors.get("model", []))))
        return redirect("chat", key=key)
    context = {"session": session, "model_form": form}
    return render(request, "sessions_app/_chat_model.html", context)


@require_POST
def approval_answer(request: HtmxHttpRequest) -> HttpResponse:
    """A click on an approval card: "Allow once", "Allow always" or "Deny", the same
    answer as the socket's approval frame. htmx swaps the card for nothing (every
    other tab drops it on the broadcast), or for the card and why it was refused."""
    try:
        request_id = uuid.UUID(request.POST.get("request_id", ""))
    except ValueError:
        raise Http404("No such approval request") from None
    approval = get_owned_or_404(ApprovalRequest, request.user, pk=request_id)
    session = get_owned_or_404(Session, request.user, pk=approval.session_id)
    decision = request.POST.get("decision", "")
    try:
        answer_approval(request.user, session.key, str(approval.pk), decision)
    except ApprovalError as exc:
        approval.refresh_from_db()  # answered meanwhile (another tab): no buttons then
        if not request.htmx:
            messages.error(request, str(exc))
            return redirect("chat", key=session.key)
        return render(request, "sessions_app/_approval.html", {"approval": approval, "error": exc})
    if not request.htmx:
        return redirect("chat", key=session.key)
    return HttpResponse("")


def chat_events(request: HtmxHttpRequest, key: str) -> HttpResponse:
    """Events after `?after=<id>`: what a reconnecting page missed."""
    session = open_chat(request, key)
    try:
        after = int(request.GET.get("after", 0))
    except ValueError:
        after = 0
    events = session_events(session, after=after)
    return render(request, "sessions_app/_events.html", {"events": events})


def sidebar(request: HtmxHttpRequest) -> HttpResponse:
    """The chat list; for the chat page that asks, its title too (out of band): a
    chat is named by its first message after the page was drawn."""
    current, query = request.GET.get("current", ""), request.GET.get("q", "")
    chats = chat.sidebar_chats(request.user, query=query)
    current_chat = next((session for session in chats if session.key == current), None)
    return render(
        request,
        "sessions_app/_sidebar.html",
        {"chats": chats, "current_key": current, "current_chat": current_chat, "query": query},
    )


def chat_rename(request: HtmxHttpRequest, key: str) -> HttpResponse:
    """A page with the title form (the chat header's form posts here too); htmx
    gets the header's title back, a plain form a redirect to the chat."""
    session = open_chat(request, key)
    form = ChatTitleForm(request.POST if request.method == "POST" else None)
    if form.is_valid():
        session = chat.rename_chat(request.user, key, form.cleaned_data["title"])
        if not request.htmx:
            messages.success(request, f"Renamed the chat “{session.title}”.")
            return redirect("chat", key=key)
        response = render(request, "sessions_app/_chat_title.html", {"session": session})
        response["HX-Trigger"] = "neotask:sessions"  # the sidebar shows the new title
        return response
    context = {"session": session, "form": form}
    if request.htmx:  # a 200: htmx swaps in no other answer, and the errors must show
        return render(request, "sessions_app/_chat_title.html", context)
    status = 400 if form.is_bound else 200
    return render(request, "sessions_app/chat_rename.html", context, status=status)


def session_list(request: HtmxHttpRequest) -> HttpResponse:
    sessions = Session.objects.owned_by(request.user).select_related("agent")[:200]
    return render(request, "sessions_app/home.html", {"sessions": sessions})


def session_detail(request: HtmxHttpRequest, pk: str) -> HttpResponse:
    session = get_owned_or_404(Session, request.user, pk=session_uuid(pk))
    events = Event.objects.owned_by(request.user).filter(session_id=str(session.pk))
    page = Paginator(events, EVENTS_PER_PAGE).get_page(request.GET.get("page"))
    page.object_list = list(page.object_list)  # the events named below are those shown
    name_recalled_chats(page.object_list)
    return render(request, "sessions_app/session_detail.html", {"session": session, "page": page})


def event_source(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """An event in its place: the page of its session that shows it, anchored at it
    (where a fact's provenance links)."""
    event = get_owned_or_404(Event, request.user, pk=pk)
    session = get_owned_or_404(Session, request.user, pk=session_uuid(event.session_id))
    before = Event.objects.owned_by(request.user).filter(
        Q(created_at__lt=event.created_at) | Q(created_at=event.created_at, id__lt=event.pk),
        session_id=event.session_id,
    )
    page = before.count() // EVENTS_PER_PAGE + 1
    url = reverse("session-detail", args=[session.pk])
    return redirect(f"{url}?page={page}#event-{event.pk}")


def session_uuid(session_id: str) -> uuid.UUID:
    """The id of a Neotask session, or 404 (memory also keeps imported ids of other kinds)."""
    try:
        return uuid.UUID(session_id)
    except ValueError:
        raise Http404("No such session") from None


def session_transcript(request: HttpRequest, pk: uuid.UUID) -> StreamingHttpResponse:
    """The session as a JSONL download, read from the database in batches."""
    session = get_owned_or_404(Session.objects.select_related("owner"), request.user, pk=pk)
    # Daphne streams only an async iterator; a sync one would be read whole first.
    chunks: Iterator[str] | AsyncIterator[str]
    if isinstance(request, ASGIRequest):
        chunks = transcripts.atranscript_chunks(session)
    else:
        chunks = transcripts.transcript_chunks(session)
    response = StreamingHttpResponse(chunks, content_type="application/jsonl; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{session.pk}.jsonl"'
    return response


CLEANUP_LIST = "sessions_app/_cleanup_list.html"


def cleanup_step(request: HtmxHttpRequest, step: str, context: dict) -> HttpResponse:
    """htmx swaps in one step of the cleanup; a plain request gets the page around it."""
    return render_page(request, "sessions_app/cleanup.html", {**context, "step": step})


def cleanup_candidates(request: HtmxHttpRequest) -> dict:
    days = cleanup.configured_days()
    owned = Session.objects.owned_by(request.user)
    found = cleanup.measure(cleanup.candidate_sessions(owned, days, include_archived=True))
    return {
        "days": days,
        "idle": [candidate for candidate in found if not candidate.archived],
        "archived": [candidate for candidate in found if candidate.archived],
    }


def cleanup_page(request: HtmxHttpRequest) -> HttpResponse:
    return cleanup_step(request, CLEANUP_LIST, cleanup_candidates(request))


@require_POST
def cleanup_confirm(request: HtmxHttpRequest) -> HttpResponse:
    selection = cleanup.select(
        Session.objects.owned_by(request.user),
        request.POST.getlist("session"),
        cleanup.configured_days(),
    )
    if not selection.candidates:
        context = {**cleanup_candidates(request), "selection": selection}
        return cleanup_step(request, CLEANUP_LIST, context)
    return cleanup_step(request, "sessions_app/_cleanup_confirm.html", {"selection": selection})


@require_POST
def cleanup_delete(request: HtmxHttpRequest) -> HttpResponse:
    selection = cleanup.remove_selected(
        Session.objects.owned_by(request.user),
        request.POST.getlist("session"),
        cleanup.configured_days(),
    )
    return cleanup_step(request, "sessions_app/_cleanup_done.html", {"selection": selection})


@require_POST
def event_undo(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Undo what the tool result `pk` changed in memory (its notice's Undo, memory.undo)."""
    said = undo.undo(request.user, pk)
    return render(request, "sessions_app/_memory_undone.html", {"said": said})


@require_POST
def event_pin(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """Pin a message (always recalled) or unpin it (its default importance)."""
    event = get_owned_or_404(Event, request.user, pk=pk)
    event.toggle_pin()
    return render(request, "sessions_app/_event.html", {"event": event})


def chat_delete(request: HtmxHttpRequest, key: str) -> HttpResponse:
    """A confirmation page; deleting the chat (all its sessions) takes a POST from it."""
    session = open_chat(request, key)
    if request.method == "POST":
        try:
            report = chat_deletion.delete_chat(request.user, key)
        except (NothingToForget, chat_deletion.ChatBusy) as exc:  # e.g. another tab
            messages.error(request, str(exc))
            return redirect("chat", key=key)
        else:
            messages.success(request, f"Deleted the chat “{session}”. {report.describe()}")
        return redirect("home")
    sessions = Session.objects.owned_by(request.user).filter(key=key).count()
    return render(
        request, "sessions_app/chat_delete.html", {"session": session, "sessions": sessions}
    )


DELETE_SCOPES = ("message", "turn")


def event_delete(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """A confirmation page offering to delete the message alone or its whole turn;
    deleting takes a POST from it."""
    event = get_owned_or_404(Event, request.user, pk=pk)
    back = conversation_url(request, event.session_id)
    if request.method == "POST":
        scope = request.POST.get("scope")
        if scope not in DELETE_SCOPES:
            return HttpResponse("Choose what to delete: message or turn.", status=400)
        delete = chat_deletion.delete_turn if scope == "turn" else chat_deletion.delete_message
        try:
            report = delete(request.user, event.pk)
        except (NothingToForget, chat_deletion.ChatBusy) as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, report.describe())
        return redirect(back)
    turn = chat_deletion.turn_of(event)
    context = {"event": event, "turn": len(turn), "back": back}
    return render(request, "sessions_app/event_delete.html", context)


def conversation_url(request: HtmxHttpRequest, session_id: str) -> str:
    """Where an event is shown: its chat while the session is active, else the
    session's page (or the sessions list, for an id that names no session)."""
    try:
        session = Session.objects.owned_by(request.user).filter(pk=uuid.UUID(session_id)).first()
    except ValueError:
        session = None
    if session is None:
        return reverse("session-list")
    if session.status == Session.Status.ACTIVE:
        return reverse("chat", args=[session.key])
    return reverse("session-detail", args=[str(session.pk)])


def api_tokens(request: HtmxHttpRequest) -> HttpResponse:
    """The user's API tokens; a POST creates one and shows its secret, this once
    (rendered, not redirected: the secret must not sit in a session or a URL)."""
    form = ApiTokenForm(request.POST if request.method == "POST" else None)
    secret = ""
    if form.is_valid():
        secret = form.issue(request.user)
        form = ApiTokenForm()
    context = {
        "tokens": ApiToken.objects.owned_by(request.user),
        "form": form,
        "secret": secret,
    }
    return render_page(request, "sessions_app/tokens.html", context)


@require_POST
def revoke_api_token(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    token = get_owned_or_404(ApiToken, request.user, pk=pk)
    token.revoke(Actor.user(request.user))
    if not request.htmx:
        return redirect("api-tokens")
    return render(request, "sessions_app/_token_row.html", {"token": token})


def agent_list(request: HtmxHttpRequest) -> HttpResponse:
    """The user's agents, and a form that adds one."""
    form = NewAgentForm(request.user, request.POST if request.method == "POST" else None)
    if form.is_valid():
        try:
            with transaction.atomic():
                agent = form.save()
        except IntegrityError:  # the same name, added at the same moment (another tab)
            form.add_error("name", "You already have an agent of that name.")
        else:
            messages.success(request, f"Added the agent “{agent.name}”.")
            return redirect("agent-list")
    agents = Agent.objects.owned_by(request.user).annotate(
        chats=Count("sessions", filter=Q(sessions__status=Session.Status.ACTIVE))
    )
    status = 400 if form.is_bound else 200
    return render(
        request, "sessions_app/agents.html", {"agents": agents, "form": form}, status=status
    )


def agent_edit(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    agent = get_owned_or_404(Agent, request.user, pk=pk)
    data = request.POST if request.method == "POST" else None
    form = AgentPromptForm(request.user, data, instance=agent)
    if form.is_valid():
        form.save()
        messages.success(request, f"Saved the agent “{agent.name}”.")
        return redirect("agent-list")
    status = 400 if form.is_bound else 200
    context = {
        "agent": agent,
        "form": form,
        "name_form": AgentNameForm(initial={"name": agent.name}),
    }
    return render(request, "sessions_app/agent_edit.html", context, status=status)


@require_POST
def agent_rename(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    agent = get_owned_or_404(Agent, request.user, pk=pk)
    old_name = agent.name
    name_form = AgentNameForm(request.POST)
    if name_form.is_valid():
        try:
            rename_agent(agent, name_form.cleaned_data["name"])
        except RenameError as exc:
            name_form.add_error("name", str(exc))
        else:
            messages.success(request, f"Renamed the agent “{old_name}” to “{agent.name}”.")
            return redirect("agent-edit", pk=agent.pk)
    agent.refresh_from_db()
    form = AgentPromptForm(request.user, instance=agent)
    context = {"agent": agent, "form": form, "name_form": name_form}
    return render(request, "sessions_app/agent_edit.html", context, status=400)
