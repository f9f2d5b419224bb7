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


# The model's part: counting, shares and the confident chain -----------------------


def test_it_counts_a_chain_and_shares_the_confidence_among_its_siblings(alice):
    Macro.objects.observe(alice, "terminal", "git status", "terminal", {"command": "git diff"})
    Macro.objects.observe(alice, "terminal", "git status", "read_file", {"path": "a"})
    Macro.objects.observe(alice, "terminal", "git status", "terminal", {"command": "git add ."})
    Macro.objects.observe(alice, "terminal", "ls", "read_file", {"path": "b"})
    chains = {
        (m.trigger_args_pattern, m.next_tool): (m.used_count, m.confidence, m.next_args)
        for m in Macro.objects.filter(owner=alice)
    }
    assert chains == {
        ("git status", "terminal"): (2, pytest.approx(2 / 3), {"command": "git add ."}),
        ("git status", "read_file"): (1, pytest.approx(1 / 3), {"path": "a"}),
        ("ls", "read_file"): (1, 1.0, {"path": "b"}),
    }


def test_it_offers_the_likeliest_chain_its_owner_has_not_turned_off(alice, bob, configure):
    configure("macros", hint_confidence=0.3, min_uses=1)
    for following in ("remember_fact", "remember_fact", "terminal"):
        Macro.objects.observe(alice, "search_memory", None, following, {})
    mine = Macro.objects.owned_by(alice)
    assert mine.confident("search_memory", None).next_tool == "remember_fact"
    mine.filter(next_tool="remember_fact").update(is_disabled=True)
    assert mine.confident("search_memory", None).next_tool == "terminal"
    assert Macro.objects.owned_by(bob).confident("search_memory", None) is None
    assert mine.confident("search_memory", "query") is None  # another pattern, another chain
