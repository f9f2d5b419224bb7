"""Text from another agent's files as the databases store it."""

from __future__ import annotations

import json
from typing import Any

# An imported event's data, as JSON, at most: a longer one is cut (its longest
# strings first), so a huge message is never stored whole.
MAX_EVENT_BYTES = 64 * 1024
CUT_MARK = f"\n[cut on import: longer than {MAX_EVENT_BYTES // 1024} KB]"
CUT_KEY = "cut_on_import"  # the data's own size as JSON, kept with what was cut
# Room for the mark and the key: what is left of the event for its own strings.
ROOM = MAX_EVENT_BYTES - 2 * len(CUT_MARK) - len(CUT_KEY) - 32


def storable(value: Any) -> Any:
    """`value` (a string, or JSON) without what a database refuses: PostgreSQL
    takes no NUL character, UTF-8 no lone surrogate (JSON's "\\ud800")."""
    if isinstance(value, str):
        return value.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, list):
        return [storable(item) for item in value]
    if isinstance(value, dict):
        return {storable(key): storable(item) for key, item in value.items()}
    return value


def json_bytes(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode())


def shortened(value: Any, limit: int) -> Any:
    """`value` with every string in it cut to its first `limit` bytes (whole characters)."""
    if isinstance(value, str):
        if len(value) * 4 <= limit:  # fits whatever its characters
            return value
        raw = value.encode()
        return value if len(raw) <= limit else raw[:limit].decode("utf-8", "ignore")
    if isinstance(value, list):
        return [shortened(item, limit) for item in value]
    if isinstance(value, dict):
        return {key: shortened(item, limit) for key, item in value.items()}
    return value


def fitted(data: dict[str, Any]) -> dict[str, Any] | None:
    """`data` with its strings cut to the longest length at which it takes ROOM
    bytes of JSON at most; None when its shape alone takes more."""
    low, high = 0, ROOM
    while low < high:
        middle = (low + high + 1) // 2
        if json_bytes(shortened(data, middle)) <= ROOM:
            low = middle
        else:
            high = middle - 1
    smaller = shortened(data, low)
    return smaller if json_bytes(smaller) <= ROOM else None


def cut(data: dict[str, Any]) -> dict[str, Any] | None:
    """`data` cut to MAX_EVENT_BYTES of JSON, its content marked; None when it fits
    as it is. Thousands of tool calls that cannot fit leave the content only."""
    size = json_bytes(data)
    if size <= MAX_EVENT_BYTES:
        return None
    content = data.get("content")
    smaller = fitted(data) or fitted({"content": content if isinstance(content, str) else ""})
    assert smaller is not None  # a single string always fits
    if isinstance(smaller.get("content"), str):
        smaller["content"] += CUT_MARK
    smaller[CUT_KEY] = size
    return smaller
