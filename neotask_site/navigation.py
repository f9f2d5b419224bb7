"""The site's navigation, defined once: Chat, then its pages in groups (Memory,
Automations, Settings), each link marked when it is the page shown (the base
template draws it; `neotask_site/static/neotask/toggles.js` opens and closes the groups)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.http import HttpRequest
from django.urls import reverse
from django.utils.functional import SimpleLazyObject


@dataclass(frozen=True)
class Link:
    label: str
    url_name: str
    staff: bool = False  # shown to the site's staff only
    # Other paths of the same page (the chat's own URLs, a fact's edit form…):
    # a path is the link's that starts with the longest of them.
    prefixes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Group:
    label: str
    links: tuple[Link, ...]


NAVIGATION: tuple[Link | Group, ...] = (
    Link("Chat", "home", prefixes=("/chat/",)),
    Group(
        "Memory",
        (
            Link("Search", "memory-search"),
            Link("Facts", "fact-list"),
            Link("Files", "memory-files"),
            Link("Macros", "macro-list"),
            Link("History", "history"),
        ),
    ),
    Group("Automations", (Link("Tasks", "task-list"), Link("Agents", "agent-list"))),
    Group(
        "Settings",
        (
            Link("Models", "model-providers", staff=True),
            Link("MCP", "mcp-servers"),
            Link("API tokens", "api-tokens"),
            Link("Your data", "data"),
            Link("Import", "import"),
            Link("Sessions", "session-list"),
            Link("Add user", "user-add", staff=True),
            Link("Admin", "admin:index", staff=True),
        ),
    ),
)


@dataclass
class Shown:
    """A link or a group as the page draws it."""

    label: str
    url: str = ""
    current: bool = False
    links: list[Shown] = field(default_factory=list)


def current_path(path: str, links: list[tuple[Link, str]]) -> str:
    """Of the links' URLs and prefixes, the longest that `path` is in ("/" only itself)."""
    found = ""
    for link, url in links:
        for start in (url, *link.prefixes):
            inside = path == start or (start != "/" and path.startswith(start))
            if inside and len(start) > len(found):
                found = start
    return found


def navigation(request: HttpRequest) -> dict[str, Any]:
    """The context processor: `navigation`, for a signed-in user, with the page's
    link marked; lazy, as htmx fragments are rendered with it too and draw none."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"navigation": SimpleLazyObject(lambda: shown_to(request, user.is_staff))}


def shown_to(request: HttpRequest, staff: bool) -> list[Shown]:
    visible = [
        (link, reverse(link.url_name))
        for item in NAVIGATION
        for link in (item.links if isinstance(item, Group) else (item,))
        if staff or not link.staff
    ]
    found = current_path(request.path, visible)
    shown = {
        link: Shown(link.label, url, current=bool(found) and found in (url, *link.prefixes))
        for link, url in visible
    }
    items = []
    for item in NAVIGATION:
        if isinstance(item, Link):
            items.append(shown[item])
            continue
        links = [shown[link] for link in item.links if link in shown]
        items.append(Shown(item.label, current=any(link.current for link in links), links=links))
    return items
