from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.db.models import Q
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from core.history import Actor
from core.htmx import HtmxHttpRequest, render_page
from core.ownership import get_owned_or_404
from memory import copies, documents, forgetting
from memory.files import indexing, paths
from memory.files.history import record_file_change, text_now
from memory.forms import FactForm
from memory.models import Fact, Macro
from memory.provenance import where_said, with_provenance
from memory.search import SHOWN_RATIO, SearchHit, kept_by_cutoff, search_memory
from memory.workspace import DEFAULT_AGENT, AgentNameError, check_agent_name, workspace_dir

RESULTS = 20
MAX_QUERY = 2000


def memory_search(request: HtmxHttpRequest) -> HttpResponse:
    """The search box: the whole page, or only the results for htmx. Only the hits
    that bear on the query (memory.search.kept_by_cutoff), each event with where it
    was said."""
    query = request.GET.get("q", "").strip()[:MAX_QUERY]
    hits = search_memory(request.user, query, k=RESULTS) if query else []
    hits = kept_by_cutoff(hits, settings.NEOTASK["memory"]["search_min_similarity"], SHOWN_RATIO)
    said = where_said(request.user.pk, [hit.event for hit in hits if isinstance(hit, SearchHit)])
    rows = [(hit, said.get(hit.event.pk) if isinstance(hit, SearchHit) else None) for hit in hits]
    return render_page(request, "memory/search.html", {"query": query, "rows": rows})


def workspace_of(request: HtmxHttpRequest) -> tuple[str, Path]:
    """The requesting user's workspace of `?agent=` (default DEFAULT_AGENT): paths are per owner
    id, so another user's files are never reachable. Not created here: a GET makes nothing,
    and the first write makes the folders it needs."""
    agent = request.GET.get("agent") or request.POST.get("agent") or DEFAULT_AGENT
    try:
        check_agent_name(agent)
    except AgentNameError:
        raise Http404("No such agent") from None
    return agent, workspace_dir(request.user.pk, agent, create=False)


def file_url(agent: str, path: str) -> str:
    return f"{reverse('memory-file')}?{urlencode({'agent': agent, 'path': path})}"


def files_url(agent: str) -> str:
    return f"{reverse('memory-files')}?{urlencode({'agent': agent})}"


def memory_files(request: HtmxHttpRequest) -> HttpResponse:
    """The files on disk now; a GET indexes nothing (writes, searches and the watcher job do)."""
    agent, _ = workspace_of(request)
    listed = indexing.list_files(request.user, agent)
    context = {"agent": agent, "files": listed, "accept": documents.ACCEPT_ATTRIBUTE}
    return render(request, "memory/files.html", context)


def existing_file(request: HtmxHttpRequest, workspace: Path) -> str:
    """The memory path the request names (?path= or the form), or 404. A link there
    exists (its page says it is not followed)."""
    path = request.GET.get("path") or request.POST.get("path", "")
    try:
        shown = paths.memory_path(path)
    except paths.MemoryPathError as exc:
        raise Http404(str(exc)) from None
    if not paths.memory_file_exists(workspace, shown):
        raise Http404("No such memory file")
    return shown


def memory_file(request: HtmxHttpRequest) -> HttpResponse:
    """View a file and edit it; saving refuses to overwrite changes made meanwhile."""
    agent, workspace = workspace_of(request)
    shown = existing_file(request, workspace)
    context: dict[str, Any] = {"agent": agent, "path": shown}
    status = 200
    if request.method == "POST":
        text = request.POST.get("text", "")
        before = text_now(workspace, shown)
        try:
            paths.save_if_unchanged(workspace, shown, text, request.POST.get("sha256", ""))
        except paths.FileConflict as conflict:
            status = 200 if request.htmx else 409  # htmx swaps only successful responses
            context.update(
                conflict=conflict.current_text, text=text, sha256=conflict.current_sha256
            )
        except paths.MemoryPathError as exc:
            status = 400
            context.update(error=str(exc), text=text, sha256=request.POST.get("sha256", ""))
        else:
            actor = Actor.user(request.user)
            record_file_change(request.user, agent, shown, actor, before, text)
            indexing.index_path(request.user, agent, shown)
            if not request.htmx:
                messages.success(request, f"Saved {shown}.")
                return redirect(file_url(agent, shown))
            context["saved"] = True
    if "text" not in context:
        try:
            context["text"], context["sha256"] = paths.read_memory_file(workspace, shown)
        except paths.NotFound:  # deleted meanwhile
            raise Http404("No such memory file") from None
        except paths.MemoryPathError as exc:  # a link, binary, too large, not UTF-8
            context["unreadable"] = str(exc)
    return render_page(request, "memory/file.html", context, status=status)


@require_POST
def memory_file_new(request: HtmxHttpRequest) -> HttpResponse:
    agent, workspace = workspace_of(request)
    name = request.POST.get("name", "").strip()
    path = paths.new_file_path(name)
    try:
        shown = paths.memory_path(path)
        if paths.memory_file_exists(workspace, shown):
            raise paths.MemoryPathError(f"{shown} already exists.")
        paths.write_memory_file(workspace, shown, "")
    except paths.MemoryPathError as exc:
        messages.error(request, str(exc))
        return redirect(files_url(agent))
    record_file_change(request.user, agent, shown, Actor.user(request.user), None, "")
    indexing.index_path(request.user, agent, shown)
    return redirect(file_url(agent, shown))


@require_POST
def memory_document_upload(request: HtmxHttpRequest) -> HttpResponse:
    """A document converted into a memory file of the agent, from the files page or
    the chat's paperclip. A form post goes back to `next` (a page of this site) or the
    files page, with a message; the paperclip's request (htmx's header:
    neotask_site/static/neotask/attach.js) gets the chat's note saying what happened,
    400 if the file was refused."""
    agent, _ = workspace_of(request)
    back = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(back, {request.get_host()}, request.is_secure()):
        back = files_url(agent)
    upload = request.FILES.get("document")
    name = (upload.name if upload is not None else "") or ""
    context: dict[str, Any] = {"name": name}
    try:
        if upload is None or upload.file is None:
            raise documents.DocumentError("Choose a file to add to memory.")
        # Before reading it: a huge upload is refused without holding it in memory.
        documents.check_upload_size(name, upload.size or 0)
        # The file Django received it into, copied to the converter's: never read whole here.
        shown = documents.add_document(
            request.user,
            agent,
            name,
            upload.file,
            Actor.user(request.user),
            documents.vouched_chat(request.user, request.POST.get("session", "")),
        )
    except (documents.DocumentError, paths.MemoryPathError) as exc:
        context["error"] = str(exc)
    else:
        passages = documents.passages(request.user, agent, shown)
        context.update(path=shown, url=file_url(agent, shown), passages=passages)
    if request.htmx:
        status = 400 if "error" in context else 200
        return render(request, "memory/_upload_note.html", context, status=status)
    if upload is None:
        messages.error(request, context["error"])
    elif "error" in context:
        messages.error(request, f"Not added to memory: {context['error']}")
    else:
        messages.success(
            request,
            f"Added {name} to memory as {shown}: {passages} passage{pluralize(passages)}.",
        )
    return redirect(back)


def memory_file_delete(request: HtmxHttpRequest) -> HttpResponse:
    """A confirmation page; deleting takes a POST from it."""
    agent, workspace = workspace_of(request)
    shown = existing_file(request, workspace)
    if request.method == "POST":
        try:
            forgetting.forget_memory_file(request.user, agent, shown, Actor.user(request.user))
        except paths.MemoryPathError as exc:  # a link, or changed meanwhile
            messages.error(request, str(exc))
        else:
            messages.success(request, f"Deleted {shown}.")
        return redirect(files_url(agent))
    return render(request, "memory/file_delete.html", {"agent": agent, "path": shown})


def forget(request: HtmxHttpRequest) -> HttpResponse:
    """The forget dialog: everything that still states a fact or a message
    (`?subject=fact:<id>` or `event:<id>`), each with a checkbox; its POST
    forgets the ones ticked (memory.copies). For htmx, the dialog alone."""
    subject = request.POST.get("subject") or request.GET.get("subject", "")
    back = (
        request.POST.get("next")
        or request.GET.get("next")
        or (request.htmx.current_url if request.htmx else request.META.get("HTTP_REFERER"))
        or ""
    )
    if not url_has_allowed_host_and_scheme(back, {request.get_host()}, request.is_secure()):
        back = reverse("fact-list") if subject.startswith("fact:") else reverse("memory-search")
    context: dict[str, Any] = {"subject": subject, "next": back}
    if request.method == "POST":
        actor = Actor.user(request.user)
        try:
            report = copies.forget_selected(
                request.user, subject, request.POST.getlist("copy"), actor
            )
        except (
            copies.CopyError,
            forgetting.Busy,
            paths.MemoryPathError,
            paths.FileConflict,
        ) as exc:
            if isinstance(exc, paths.FileConflict):
                error = CHANGED
            elif isinstance(exc, paths.MemoryPathError):  # e.g. the file is a link now
                error = f"{exc} Nothing more was deleted."
            else:
                error = str(exc)
                if "nothing was deleted" not in error.lower():
                    error += " Nothing was deleted."
            return render_page(
                request, "memory/forget.html", {**context, "error": error}, status=400
            )
        messages.success(request, report.describe())
        return redirect(back)
    try:
        context["copies"] = found = copies.copies_of(request.user, subject)
    except copies.CopyError as exc:
        raise Http404(str(exc)) from None
    if subject.startswith("event:"):  # the chat's other choice: the message or its turn
        context["event_delete"] = reverse("event-delete", args=[int(found.subject[6:])])
    return render_page(request, "memory/forget.html", context)


# Files go first (memory.copies.forget_selected): a file that changed between the
# check and the write stops the rest.
CHANGED = "A memory file changed meanwhile: nothing more was deleted. Open the dialog again."


# Facts and macros: the user's view of what the agent learned -------------------

FACT_ROWS = 200
FACT_ROW = "memory/_fact_row.html"
FACT_RESULTS = "memory/_fact_rows.html"
MACRO_ROW = "memory/_macro_row.html"


def owned_facts(request: HtmxHttpRequest, query: str = "") -> list[Fact]:
    facts = Fact.objects.owned_by(request.user).select_related("origin_event")
    if query:
        facts = facts.filter(
            Q(category__icontains=query) | Q(key__icontains=query) | Q(value__icontains=query)
        )
    return with_provenance(facts[:FACT_ROWS])


def fact_row_response(request: HtmxHttpRequest, fact: Fact) -> HttpResponse:
    return render(request, FACT_ROW, {"fact": with_provenance([fact])[0]})


def fact_list(request: HtmxHttpRequest) -> HttpResponse:
    """The facts page; a POST adds one. htmx gets the part it replaces: the rows
    for a search, the form and the rows after an add."""
    # NUL never matches a fact, and PostgreSQL refuses it in a query.
    query = request.GET.get("q", "").replace("\x00", "").strip()[:MAX_QUERY]
    form = FactForm(request.POST if request.method == "POST" else None, owner=request.user)
    added = None
    if form.is_valid() and (added := form.save_unless_taken()):
        if not request.htmx:
            messages.success(request, f"Added {added}.")
            return redirect("fact-list")
        form = FactForm(owner=request.user)
    context = {"form": form, "facts": owned_facts(request, query), "query": query, "added": added}
    if request.htmx and request.method == "GET":  # the search box replaces only the rows
        return render(request, FACT_RESULTS, context)
    return render_page(request, "memory/facts.html", context)


def fact_row(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """One row as it is now (what "cancel" of an inline edit swaps back in)."""
    fact = get_owned_or_404(Fact, request.user, pk=pk)
    if not request.htmx:
        return redirect("fact-list")
    return fact_row_response(request, fact)


def fact_edit(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The edit form: in place of the row for htmx, as a page otherwise."""
    fact = get_owned_or_404(Fact, request.user, pk=pk)
    form = FactForm(
        request.POST if request.method == "POST" else None, instance=fact, owner=request.user
    )
    if form.is_valid() and (saved := form.save_unless_taken()):
        fact = saved
        if not request.htmx:
            messages.success(request, f"Saved {fact}.")
            return redirect("fact-list")
        return fact_row_response(request, fact)
    return render_page(request, "memory/fact_edit.html", {"fact_pk": pk, "form": form})


@require_POST
def fact_delete(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    fact = get_owned_or_404(Fact, request.user, pk=pk)
    forgetting.forget_facts(request.user, Fact.objects.filter(pk=fact.pk), Actor.user(request.user))
    if request.htmx:
        return HttpResponse("")  # swaps the row for nothing
    messages.success(request, f"Deleted {fact}.")
    return redirect("fact-list")


def macro_list(request: HtmxHttpRequest) -> HttpResponse:
    macros = Macro.objects.owned_by(request.user)
    return render_page(request, "memory/macros.html", {"macros": macros})


@require_POST
def macro_disable(request: HtmxHttpRequest, pk: int, disabled: bool) -> HttpResponse:
    """Disabled macros stay (and keep learning) but give the agent no hints."""
    macro = get_owned_or_404(Macro, request.user, pk=pk)
    macro.is_disabled = disabled
    macro.save(update_fields=["is_disabled", "updated_at"])
    if not request.htmx:
        return redirect("macro-list")
    return render(request, MACRO_ROW, {"macro": macro})


@require_POST
def macro_delete(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    macro = get_owned_or_404(Macro, request.user, pk=pk)
    macro.delete()
    if request.htmx:
        return HttpResponse("")
    messages.success(request, f"Deleted the macro {macro}.")
    return redirect("macro-list")
