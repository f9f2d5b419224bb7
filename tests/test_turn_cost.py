"""What one chat input costs the database, end to end through the runner (the
claim, the queue, the chat's session, the turn, its events and accounting):
counted with the database's own queries, as a chat, the API and the scheduler
send it. Bounds from the code that ran them; a change that adds a query to
every turn shows here."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory import tasks
from memory.models import EventType
from monitoring import counters
from monitoring.models import Counter
from sessions_app import chat, runner
from sessions_app.models import Session
from tests.support.scripted_llm import Reply, reply_with_tool

pytestmark = pytest.mark.django_db(transaction=True)

# The code ran 21, 26 and 40 statements on SQLite, 15, 20 and 34 on PostgreSQL
# (tools run in threads of their own, whose statements are not counted). Of a
# plain message's on PostgreSQL: 1 counts the input against its quota, takes the
# chat's claim and stores the input running
# (sessions_app.models.ChatInput.objects.store; on SQLite a transaction of 5:
# BEGIN, the count, the claim, the input, COMMIT, SQLite having no
# data-modifying CTEs); 1 reads the session with what the turn needs of its events
# and of its owner's facts (Session.objects.active(said=True): the previous
# turn's text, whether it had a message, working memory's marker, the facts'
# version); 1 stores the message with its vector; 5 gather memory (the session's
# summary and recall, relevance, similarity, the fused search with what its
# candidates' turns add (memory.turns: +0.04 of LoCoMo recall@10; a statement of
# its own on SQLite), the hits' rows); 1 keeps the answer's first words in the
# claim, so a crash loses none (sessions_app.runner); 1 stores the answer, 1
# keeps the turn's usage with its message, 2 add it to the session and the
# owner's day (quotas), 2 end the input and let the claim go. SQLite's 6 more:
# the transaction's 4, the turns' cues, its in-process vector index's sync (1:
# forgotten events and new vectors together, memory.vector_index); its hits are
# checked only when outside the turn's context (here they are all in it).
# Metrics are counted in process and sent every 2 s (monitoring.counters), and
# embedding requests gathered for 0.5 s and sent as one job by a thread of their
# own (memory.tasks; the minute's sweep embeds what a lost request missed), as
# in production: both held here; the quota limits, MCP tools and facts come from
# per-process copies (core.process_cache).
MAX_QUERIES = {"sqlite": {0: 21, 1: 26, 2: 40}, "postgresql": {0: 15, 1: 20, 2: 34}}


@pytest.fixture
def memories_session(user_with_memories) -> Session:
    return chat.start_chat(user_with_memories)


def send(session: Session, text: str) -> dict:
    outcome = async_to_sync(runner.submit)(session.owner, session.key, text, wait=True)
    assert outcome is not None and outcome.status == "completed", outcome
    return outcome.as_json()


@pytest.mark.parametrize("rounds", [0, 1, 2])
def test_it_answers_a_message_in_a_bounded_number_of_queries(
    memories_session, llm, rounds, monkeypatch
):
    monkeypatch.setattr(counters, "COUNTS", counters.PendingCounts(window=600))
    requested: list[int] = []  # held for the sender thread, as in production
    monkeypatch.setattr(tasks.EMBEDDING_REQUESTS, "add", lambda *ids: requested.extend(ids))
    llm.script(Reply(text="Hello."))
    send(memories_session, "Hi, who likes sailing?")  # the session's first turn: auto-recall
    tools = [reply_with_tool("list_memory_files", {}) for _ in range(rounds)]
    llm.script(*tools, Reply(text="Your cousins do."))
    with CaptureQueriesContext(connection) as queries:
        outcome = send(memories_session, "Who likes sailing on the lake?")
    assert outcome["answer"] == "Your cousins do."
    assert len(queries) <= MAX_QUERIES[connection.vendor][rounds], len(queries)
    answer = memories_session.events().get(
        event_type=EventType.ASSISTANT_RESPONSE, text="Your cousins do."
    )
    assert answer.pk in requested  # its vector asked for, after the commit
    counters.flush()  # both turns counted, once sent
    assert Counter.objects.get(name=counters.TURNS, label="completed").value == 2
