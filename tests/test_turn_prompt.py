"""A turn's prompt is built once (agent/prompt.py): memory is gathered, and memory
searched, once per turn, however many rounds of tool calls follow; each round
re-reads only the recent exchange. Counted with the database's own queries."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agent import prompt as turn_prompt
from agent.runtime import TurnRequest, run_turn
from memory import recall, retrieval
from sessions_app import chat, runner
from tests.support.scripted_llm import Reply, reply_with_tool
from tests.support.websocket import ignore

pytestmark = pytest.mark.django_db(transaction=True)

# Upper bounds from the code, which ran 16, 23 and 39 queries on SQLite (12, 18 and
# 33 on PostgreSQL; with one memory search per round it had been 19, 35 and 60).
MAX_QUERIES = {0: 16, 1: 23, 2: 39}


@pytest.fixture
def searches(monkeypatch) -> Counter:
    """How often each caller ran the fused memory search."""
    counts: Counter = Counter()
    for module in (retrieval, recall):
        real = module.search_memory

        def counted(*args: Any, _real=real, _name=module.__name__, **kwargs: Any) -> Any:
            counts[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, "search_memory", counted)
    return counts


def turn(owner: User, text: str) -> None:
    result = async_to_sync(run_turn)(TurnRequest(owner=owner, session_id="s1"), text, ignore)
    assert result.status == "completed", result.error


@pytest.mark.parametrize("rounds", [0, 1, 2])
def test_memory_is_searched_once_per_turn_whatever_the_rounds(
    user_with_memories, llm, searches, rounds
):
    # The session's first turn (auto-recall runs in it too), then a second one.
    llm.script(Reply(text="Hello."))
    turn(user_with_memories, "Hi, who likes sailing?")
    searches.clear()
    tools = [reply_with_tool("list_memory_files", {}) for _ in range(rounds)]
    llm.script(*tools, Reply(text="Your cousins do."))
    with CaptureQueriesContext(connection) as queries:
        turn(user_with_memories, "Who likes sailing on the lake?")
    assert searches == {"memory.retrieval": 1}
    assert len(queries) <= MAX_QUERIES[rounds], len(queries)
    # Every round's prompt carries the same memory; the later ones also the tool results.
    prompts = [request["messages"] for request in llm.requests[-(rounds + 1) :]]
    assert len({p[0]["content"] for p in prompts}) == 1
    assert "Memories from earlier conversations" in prompts[0][0]["content"]
    assert [len(p) for p in prompts] == [len(prompts[0]) + 2 * n for n in range(rounds + 1)]


def test_a_chat_reads_its_owners_facts_again_only_once_they_changed(user_with_memories, llm):
    from django.utils import timezone

    from memory.models import Fact
    from sessions_app import chat, runner

    session = chat.start_chat(user_with_memories)

    def send(text: str) -> tuple[str, list[str]]:
        with CaptureQueriesContext(connection) as queries:
            outcome = async_to_sync(runner.submit)(user_with_memories, session.key, text, wait=True)
        assert outcome is not None and outcome.status == "completed"
        read = [q["sql"] for q in queries.captured_queries if q["sql"].startswith('SELECT "facts"')]
        return llm.requests[-1]["messages"][0]["content"], read

    def fact(key: str, value: str) -> Fact:
        return Fact(
            owner=user_with_memories,
            category="pets",
            key=key,
            value=value,
            updated_at=timezone.now(),
        )

    llm.script(*(Reply(text="ok") for _ in range(4)))
    Fact.objects.bulk_create([fact("dog", "Biscuit")])
    prompt, read = send("one")
    assert "pets/dog: Biscuit" in prompt and len(read) == 1
    _, read = send("two")
    assert read == []  # its version came with the session, in a subquery
    # Another process adds one (no signal here): the version read with the session differs.
    Fact.objects.bulk_create([fact("cat", "Miso")])
    assert "pets/cat: Miso" in send("three")[0]
    # Changed here: its signal drops the copy.
    Fact.objects.filter(key="cat").get().delete()
    assert "Miso" not in send("four")[0]


@pytest.mark.parametrize("ending", ["error", "max_iterations"])
def test_a_turn_that_did_not_complete_gathers_memory_once_too(
    user_with_memories, llm, configure, monkeypatch, ending
):
    # The meter reads the next prompt after every turn: the turn's own, not a second build.
    gathered = []
    real = turn_prompt.get_context

    def counted(*args: Any, **kwargs: Any) -> Any:
        gathered.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(turn_prompt, "get_context", counted)
    if ending == "error":
        llm.script(*[Reply(status=500, error="model down")] * 4)
    else:
        configure("llm", max_iterations=1)
        llm.script(reply_with_tool("remember_fact", {"category": "a", "key": "b", "value": "c"}))
    session = chat.start_chat(user_with_memories)
    outcome = async_to_sync(runner.submit)(session.owner, session.key, "Hello?", wait=True)
    assert outcome is not None and outcome.status == ending, outcome
    assert len(gathered) == 1
