from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from memory.search import search_memory

RESULTS = 20
MAX_QUERY = 2000


def memory_search(request: HttpRequest) -> HttpResponse:
    """The search box: the whole page, or only the results for htmx."""
    query = request.GET.get("q", "").strip()[:MAX_QUERY]
    hits = search_memory(request.user, query, k=RESULTS) if query else []
    template = "memory/_results.html" if request.htmx else "memory/search.html"
    return render(request, template, {"query": query, "hits": hits})
