"""Where a memory came from: a fact's origin, or where a message was said, told as
"from <chat>, <date>", with a link to the turn (GET /events/<id>/ finds its place
in the chat).

Memory knows a chat only by its session id; the app that keeps chats names them
(`name_chats_with`, called by sessions_app when it starts), so this app needs
nothing of it."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.urls import reverse
from django.utils import timezone

from memory.models import Event, Fact

# (owner id, session ids) → the titles of those chats that exist.
ChatTitles = Callable[[int, Collection[str]], dict[str, str]]


def no_titles(owner_id: int, session_ids: Collection[str]) -> dict[str, str]:
    return {}


chat_titles: list[ChatTitles] = [no_titles]


def name_chats_with(lookup: ChatTitles) -> None:
    chat_titles[0] = lookup


@dataclass(frozen=True)
class Provenance:
    text: str  # e.g. "from “Trip to Osaka”, 3 Dec 2026"
    url: str = ""  # the turn, or the chat; "" when there is nothing to show

    def __str__(self) -> str:
        return f"{self.text} ({self.url})" if self.url else self.text


def day(moment: datetime) -> str:
    return f"{timezone.localtime(moment):%-d %b %Y}"


def provenance_of(facts: Sequence[Fact]) -> dict[int, Provenance]:
    """Each fact's provenance by its id (facts of one owner; `origin_event` selected
    with them saves a query each); facts whose origin nobody recorded are left out."""
    if not facts:
        return {}
    sessions = {fact.origin_session_id for fact in facts if fact.origin_session_id}
    titles = chat_titles[0](facts[0].owner_id, sessions) if sessions else {}
    told = {}
    for fact in facts:
        if told_of := tell(fact, titles):
            told[fact.pk] = told_of
    return told


def with_provenance(rows: Iterable[Fact]) -> list[Fact]:
    """The facts, each with its `provenance` (None if unknown) for the pages to show."""
    facts = list(rows)
    told = provenance_of(facts)
    for fact in facts:
        fact.provenance = told.get(fact.pk)  # type: ignore[attr-defined]
    return facts


def tell(fact: Fact, titles: dict[str, str]) -> Provenance | None:
    event = fact.origin_event
    when = day(event.created_at if event is not None else fact.updated_at)
    if fact.origin_session_id:
        title = titles.get(fact.origin_session_id)
        chat = f"“{title}”" if title else "a chat"
        url = reverse("event-source", args=[event.pk]) if event is not None else ""
        if not url and title is not None:
            url = reverse("session-detail", args=[fact.origin_session_id])
        summary = "a summary of " if fact.origin == Fact.Origin.CONSOLIDATION else ""
        return Provenance(f"from {summary}{chat}, {when}", url)
    if fact.origin == Fact.Origin.IMPORT:
        return Provenance(f"from {fact.origin_label or 'an import'}, {when}")
    if fact.origin == Fact.Origin.CLIENT:
        return Provenance(f"from {fact.origin_label or 'an API client'}, {when}")
    if fact.origin == Fact.Origin.PAGE:
        return Provenance(f"written on the facts page, {when}")
    if fact.origin == Fact.Origin.ADMIN:
        by = f" by {fact.origin_label}" if fact.origin_label else ""
        return Provenance(f"set in the admin{by}, {when}")
    return None


def where_said(owner_id: int, events: Sequence[Event]) -> dict[int, Provenance]:
    """Where each of an owner's events was said, by its id (said_in)."""
    sessions = {event.session_id for event in events}
    titles = chat_titles[0](owner_id, sessions) if sessions else {}
    return {
        event.pk: said_in(event.pk, titles.get(event.session_id), day(event.created_at))
        for event in events
    }


def said_in(event_id: int, title: str | None, when: str) -> Provenance:
    """Where an event was said: "from “Trip to Osaka”, 3 Dec 2026", linked to its place;
    "from a chat" (unlinked) when the chat is gone or was never one of Neotask's
    (an import's session id), or nobody looked its title up."""
    if title is None:
        return Provenance(f"from a chat, {when}")
    return Provenance(f"from “{title}”, {when}", reverse("event-source", args=[event_id]))
