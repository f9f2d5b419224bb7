"""Memory in the JSON API (/api/v1/facts/, /api/v1/memory-files/), on the shared
framework (core.api): the owner's facts with their provenance, and forgetting
a fact or a memory file."""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpResponse, JsonResponse

from core.api import ApiError, ApiRequest, endpoint, paged, row_id
from core.history import Actor
from core.ownership import get_owned_or_404
from memory import forgetting
from memory.files.paths import MemoryPathError, NotFound
from memory.forgetting import Forgotten
from memory.models import Fact
from memory.provenance import provenance_of
from memory.workspace import DEFAULT_AGENT, AgentNameError, check_agent_name


def forgotten(report: Forgotten) -> JsonResponse:
    """Every deletion's answer: what went (sessions_app.api's too)."""
    return JsonResponse({"deleted": report.as_dict()})


def fact_dicts(facts: list[Fact]) -> list[dict[str, Any]]:
    told = provenance_of(facts)
    return [
        {
            **fact.to_dict(),
            "provenance": (
                {"text": told[fact.pk].text, "url": told[fact.pk].url} if fact.pk in told else None
            ),
        }
        for fact in facts
    ]


def list_facts(request: ApiRequest) -> HttpResponse:
    """The owner's facts, each with where its value came from."""
    facts = Fact.objects.owned_by(request.user).select_related("origin_event")
    return paged(request, "facts", facts, fact_dicts)


def delete_fact(request: ApiRequest, pk: str) -> HttpResponse:
    fact = get_owned_or_404(Fact, request.user, pk=row_id(pk))
    facts = Fact.objects.filter(pk=fact.pk)
    return forgotten(forgetting.forget_facts(request.user, facts, Actor.user(request.user)))


def delete_memory_file(request: ApiRequest) -> HttpResponse:
    """`?path=memory/notes.md[&agent=main]`: the file on disk and its chunks."""
    agent = request.GET.get("agent", DEFAULT_AGENT)
    path = request.GET.get("path", "")
    try:
        check_agent_name(agent)
    except AgentNameError as exc:
        raise ApiError(400, str(exc)) from None
    if not path:
        raise ApiError(400, "Name the file: ?path=memory/notes.md (and &agent=, default main).")
    try:
        actor = Actor.user(request.user)
        return forgotten(forgetting.forget_memory_file(request.user, agent, path, actor))
    except NotFound:
        raise Http404 from None
    except MemoryPathError as exc:
        raise ApiError(400, str(exc)) from None


facts_view = endpoint(GET=list_facts)
fact_view = endpoint(DELETE=delete_fact)
memory_file_view = endpoint(DELETE=delete_memory_file)
