from __future__ import annotations

import pytest

from agent.macros import hint, observe
from memory.models import Macro

SEARCH = ("search_memory", {"query": "tea"})
FACT = ("remember_fact", {"category": "pref", "key": "drink", "value": "tea"})
GIT_STATUS = ("terminal", {"command": "git status"})
GIT_DIFF = ("terminal", {"command": "git diff"})


def test_it_learns_chains_with_their_share_as_confidence(alice, configure):
    configure("macros", hint_confidence=0.7, min_uses=3)
    for _ in range(3):
        observe(alice, SEARCH, FACT)
    observe(alice, SEARCH, GIT_STATUS)
    chains = {m.next_tool: (m.used_count, m.confidence) for m in Macro.objects.filter(owner=alice)}
    assert chains == {"remember_fact": (3, 0.75), "terminal": (1, 0.25)}
    note = hint(alice, *SEARCH)
    assert note is not None
    assert "remember_fact usually follows (75% of 3 times)" in note
    assert '"key": "drink"' in note


def test_it_offers_no_hint_below_the_bar(alice, configure):
    configure("macros", hint_confidence=0.7, min_uses=3)
    observe(alice, SEARCH, FACT)
    observe(alice, SEARCH, FACT)
    assert hint(alice, *SEARCH) is None  # seen twice only
    observe(alice, SEARCH, GIT_STATUS)
    observe(alice, SEARCH, FACT)
    assert hint(alice, *SEARCH) is not None  # 3 of 4 = 0.75
    observe(alice, SEARCH, GIT_STATUS)
    assert hint(alice, *SEARCH) is None  # 3 of 5 = 0.6


def test_it_tells_terminal_commands_apart_by_prefix(alice, configure):
    configure("macros", hint_confidence=0.5, min_uses=1)
    observe(alice, GIT_STATUS, GIT_DIFF)
    observe(alice, ("terminal", {"command": "ls -la"}), FACT)
    assert Macro.objects.get(trigger_args_pattern="git status").next_tool == "terminal"
    assert Macro.objects.get(trigger_args_pattern="ls").next_tool == "remember_fact"
    assert "terminal usually follows" in hint(alice, "terminal", {"command": "git status -s"})


def test_it_keeps_each_users_macros_apart(alice, bob, configure):
    configure("macros", hint_confidence=0.5, min_uses=1)
    observe(alice, SEARCH, FACT)
    assert hint(bob, *SEARCH) is None
    observe(bob, SEARCH, GIT_STATUS)
    assert Macro.objects.get(owner=alice).confidence == pytest.approx(1.0)
    assert Macro.objects.get(owner=bob).confidence == pytest.approx(1.0)
