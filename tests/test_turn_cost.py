"""What one chat input costs the database, end to end through the runner (the
claim, the queue, the chat's session, the turn, its events and accounting):
counted with the database's own queries, as a chat, the API and the scheduler
send it. Bounds from the code that ran them; a change that adds a query to
every turn shows here."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory import recording
from memory.models import EventType
from sessions_app import chat, runner
from sessions_app.models import Session
from tests.support.scripted_llm import Reply, reply_with_tool

pytestmark = pytest.mark.django_db(transaction=True)

# On SQLite this code runs 41, 49 and 66 queries (tools run in threads of their
# own, whose queries are not counted), 3 of them the turn's metrics in one upsert
# (monitoring.counters: BEGIN, INSERT … ON CONFLICT, COMMIT), 5 the quota
# (sessions_app.quotas: BEGIN, the user's group quotas, the counting upsert and
# COMMIT around the stored input; the turn's tokens added in one upsert), 1
# the owner's MCP servers (agent.mcp_tools.tools_for) and 1 the answer's first
# words kept in the claim, so a crash loses none (sessions_app.runner).
# On PostgreSQL 2 more: each vector search's bounded count that picks an exact
# scan for an owner of few rows (memory.pgvector.PgIndex.exact).
MAX_QUERIES = {0: 43, 1: 51, 2: 68}


@pytest.fixture
def session(db) -> Session:
    owner = User.objects.create_user("owner")
    for n in range(30):  # something for every branch of memory to find
        said = f"My cousin number {n} likes sailing on the lake and reading about trains."
        recording.record(owner, "old", EventType.USER_MESSAGE, {"content": said})
    return chat.start_chat(owner)


def send(session: Session, text: str) -> dict:
    outcome = async_to_sync(runner.submit)(session.owner, session.key, text, wait=True)
    assert outcome is not None and outcome.status == "completed", outcome
    return outcome.as_json()


@pytest.mark.parametrize("rounds", [0, 1, 2])
def test_it_answers_a_message_in_a_bounded_number_of_queries(session, llm, rounds):
    llm.script(Reply(text="Hello."))
    send(session, "Hi, who likes sailing?")  # the session's first turn: auto-recall
    tools = [reply_with_tool("list_memory_files", {}) for _ in range(rounds)]
    llm.script(*tools, Reply(text="Your cousins do."))
    with CaptureQueriesContext(connection) as queries:
        outcome = send(session, "Who likes sailing on the lake?")
    assert outcome["answer"] == "Your cousins do."
    assert len(queries) <= MAX_QUERIES[rounds], len(queries)
