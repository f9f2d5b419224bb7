"""How a tool says what its calls did (`Tool.confirm`, agent/tools/confirmation.py):
kept apart so a tool's module needs nothing of the registry's loading."""

from __future__ import annotations

from collections.abc import Sequence


def counted(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def listing(verb: str, noun: str, items: Sequence[str]) -> str:
    """One thing done ("Saved: x"), or how many and which ("Saved 2 facts: x; y")."""
    if len(items) == 1:
        return f"{verb}: {items[0]}"
    return f"{verb} {counted(len(items), noun)}: {'; '.join(items)}"
