"""/metrics: Prometheus's text format behind a bearer token, with numbers that
move as the site works and no user content."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from django.db import DatabaseError, connection
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from agent.tools import ToolContext, ToolError, get_tool
from health import checks as health
from memory import recording
from monitoring import counters
from monitoring.models import Counter
from sessions_app import runner
from sessions_app.models import ChatInput
from tests.programs import counting
from tests.support.processes import app_env, run_program
from tests.support.scripted_llm import Reply

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "prometheus-token-0123456789abcdef"
NAMES = {
    "neotask_turns",
    "neotask_first_token_seconds",
    "neotask_sandbox_runs",
    "neotask_job_failures",
    "neotask_queued_inputs",
    "neotask_oldest_queued_input_seconds",
    "neotask_embedding_backlog",
    "neotask_embedding_given_up",
    "neotask_check_up",
}


@pytest.fixture
def token(configure, monkeypatch):
    configure("server", metrics_token=TOKEN)
    monkeypatch.setattr(health, "_last_probe", None)


def scrape(authorization: str = f"Bearer {TOKEN}"):
    return Client().get("/metrics", headers={"Authorization": authorization})


def samples() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = scrape()
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def test_it_has_no_metrics_page_without_a_configured_token():
    assert Client().get("/metrics").status_code == 404
    assert scrape().status_code == 404


def test_it_refuses_scrapes_without_the_right_token(token, alice_client):
    assert scrape("").status_code == 401
    assert scrape("Bearer").status_code == 401
    assert scrape(f"Basic {TOKEN}").status_code == 401
    assert scrape("Bearer not-the-token").status_code == 403
    assert scrape(f"Bearer {TOKEN}x").status_code == 403
    # A logged-in user is no scraper.
    assert alice_client.get("/metrics").status_code == 401


def test_it_serves_every_metric_in_prometheus_text_format(token):
    response = scrape()
    families = {f.name for f in text_string_to_metric_families(response.content.decode())}
    assert families == NAMES


def test_it_counts_a_turn_and_its_first_token_and_shows_no_user_content(token, owner, session, llm):
    llm.script(Reply(text="The secret answer is forty-two."))
    before = samples()
    question = "What is my secret lighthouse?"
    outcome = asyncio.run(runner.submit(owner, session.key, question, commands=False, wait=True))
    assert outcome.status == "completed"
    after = samples()
    turns = ("neotask_turns_total", (("status", "completed"),))
    assert after[turns] - before.get(turns, 0) == 1
    assert after[("neotask_first_token_seconds_count", ())] == 1
    assert 0 < after[("neotask_first_token_seconds_sum", ())] < 30
    body = scrape().content.decode()
    for private in ("lighthouse", "forty-two", owner.username, session.key):
        assert private not in body


def test_it_shows_queued_inputs_and_the_embedding_backlog(token, owner, session):
    before = samples()
    assert before[("neotask_queued_inputs", ())] == 0
    ChatInput.objects.create(owner=owner, key=session.key, text="later")
    # Stored, its embedding job queued but no cluster running here to do it.
    recording.record(owner, str(session.pk), "user_message", {"content": "remember the lake"})
    after = samples()
    assert after[("neotask_queued_inputs", ())] == 1
    assert after[("neotask_oldest_queued_input_seconds", ())] >= 0
    backlog = ("neotask_embedding_backlog", (("kind", "events"),))
    assert after[backlog] == before[backlog] + 1


def test_it_counts_sandbox_runs_by_how_they_ended(token, owner, tmp_path, configure):
    configure("terminal", enabled=True, timeout_seconds=1.0)
    context = ToolContext(owner=owner, session_id="s1", agent_name="main", workspace=tmp_path)
    terminal = get_tool("terminal")
    terminal.run(context, {"command": "true"})
    terminal.run(context, {"command": "false"})
    with pytest.raises(ToolError, match="did not finish"):
        terminal.run(context, {"command": "sleep 5"})
    runs = {labels: v for (name, labels), v in samples().items() if name.startswith("neotask_sa")}
    assert runs == {
        (("outcome", "exited"),): 1,
        (("outcome", "failed"),): 1,
        (("outcome", "timed_out"),): 1,
    }


def test_it_loses_no_count_when_many_threads_add_at_once(token):
    def add_many() -> None:
        for _ in range(20):
            counters.count_turn("completed", 0.3)
        connection.close()  # this thread's

    threads = [threading.Thread(target=add_many) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    after = samples()
    assert after[("neotask_turns_total", (("status", "completed"),))] == 160
    assert after[("neotask_first_token_seconds_bucket", (("le", "0.5"),))] == 160
    assert after[("neotask_first_token_seconds_bucket", (("le", "0.25"),))] == 0
    assert after[("neotask_first_token_seconds_sum", ())] == pytest.approx(48.0)


def test_it_sends_the_counts_of_a_moment_together_and_a_scrape_sees_its_own(token, monkeypatch):
    sent: list[dict] = []
    upsert = counters.upsert

    def counted_upsert(amounts) -> None:
        if (counters.HEALTH_WRITES, "") not in amounts:  # (the scrape's write probe's own)
            sent.append(dict(amounts))
        upsert(amounts)

    monkeypatch.setattr(counters, "upsert", counted_upsert)
    monkeypatch.setattr(counters, "COUNTS", counters.PendingCounts(window=600))
    for _ in range(3):
        counters.count_turn("completed", 0.3)
    counters.count_sandbox_run("exited")
    assert not sent  # held in this process
    after = samples()  # the scrape sends them first
    assert len(sent) == 1
    assert after[("neotask_turns_total", (("status", "completed"),))] == 3
    assert after[("neotask_first_token_seconds_sum", ())] == pytest.approx(0.9)
    assert after[("neotask_sandbox_runs_total", (("outcome", "exited"),))] == 1


def test_its_thread_sends_them_within_the_window(token, monkeypatch):
    monkeypatch.setattr(counters, "COUNTS", counters.PendingCounts(window=0.1))
    counters.count_turn("stopped", None)
    deadline = time.monotonic() + 10
    while not Counter.objects.filter(name=counters.TURNS, label="stopped").exists():
        assert time.monotonic() < deadline, "the counts were not sent"
        time.sleep(0.02)
    assert Counter.objects.get(name=counters.TURNS, label="stopped").value == 1


def test_it_keeps_the_counts_the_database_refused_for_the_next_round(token, monkeypatch):
    pending = counters.PendingCounts(window=600)
    monkeypatch.setattr(counters, "COUNTS", pending)
    counters.count_turn("error", None)

    def refuse(amounts) -> None:
        raise DatabaseError("disk full")

    with monkeypatch.context() as down:
        down.setattr(counters, "upsert", refuse)
        assert not pending.flush()
    counters.count_turn("error", None)
    assert pending.flush()
    assert Counter.objects.get(name=counters.TURNS, label="error").value == 2


@pytest.mark.slow
def test_a_process_and_its_forked_worker_send_their_counts_when_they_exit(tmp_path):
    env = app_env(tmp_path)
    run_program(env, counting.count_and_exit)
    assert run_program(env, counting.counted) == {
        "turns{completed}": 1,
        "first_token_seconds_bucket{0.5}": 1,
        **{f"first_token_seconds_bucket{{{label}}}": 1 for label in counters.BUCKET_LABELS[2:]},
        "first_token_seconds_sum{}": 0.3,
        "sandbox_runs{exited}": 1,
    }
