"""Text from another agent's files as the databases store it."""

from __future__ import annotations

from typing import Any


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
