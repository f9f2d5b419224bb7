"""/healthz: each part's state by name, 200 when all answer, else 503.

Here in the test process, with no job cluster running (the cluster's checks,
up and down, are in tests/test_monitoring_stack.py, with real processes)."""

from __future__ import annotations

import socket

import pytest
from django.db import connection
from django.test import Client

from core.ports import free_port
from health import checks as health
from tests.support.scripted_llm import ScriptedLLM

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_probe(monkeypatch):
    monkeypatch.setattr(health, "_last_probe", None)
    monkeypatch.setattr(health, "_last_write", None)
    monkeypatch.setattr(health, "_last_states", {})


def healthz() -> tuple[int, dict[str, str]]:
    response = Client().get("/healthz")
    assert response["Content-Type"] == "application/json"
    return response.status_code, response.json()


def test_it_names_each_part_and_what_is_down_without_login(settings, llm):
    status, body = healthz()
    # No job cluster runs beside the test: down, and so 503.
    expected = {"db": "ok", "jobs": "down", "model": "ok"}
    if settings.REDIS_URL:
        expected["channels"] = "ok"
    assert (status, body) == (503, expected)


def test_its_liveness_form_answers_while_the_parts_are_down(tmp_path, django_assert_num_queries):
    # No job cluster, no model, and no database: the process itself still answers,
    # so a liveness probe does not restart it for a part that is down elsewhere.
    connection.close()
    saved = connection.settings_dict["NAME"]
    connection.settings_dict["NAME"] = str(tmp_path / "missing-dir" / "db.sqlite3")
    try:
        with django_assert_num_queries(0):
            response = Client().get("/healthz?live")
    finally:
        connection.close()
        connection.settings_dict["NAME"] = saved
    assert (response.status_code, response.json()) == (200, {"web": "ok"})
    assert healthz()[0] == 503  # without ?live: the checks


def test_it_answers_503_when_the_database_does_not(tmp_path):
    # Point the connection at a file that cannot be opened: a real failure.
    connection.close()
    saved = connection.settings_dict["NAME"]
    connection.settings_dict["NAME"] = str(tmp_path / "missing-dir" / "db.sqlite3")
    connection.settings_dict["HOST"], host = "127.0.0.1", connection.settings_dict["HOST"]
    connection.settings_dict["PORT"], port = str(free_port()), connection.settings_dict["PORT"]
    try:
        status, body = healthz()
    finally:
        connection.close()
        connection.settings_dict.update(NAME=saved, HOST=host, PORT=port)
    assert status == 503
    # Which model the site uses is stored in the database (config.toml sets
    # none here): unknown, not down.
    assert (body["db"], body["model"]) == ("down", "unknown")


def test_it_reports_a_stopped_model_down_and_probes_it_at_most_every_few_seconds(configure):
    with ScriptedLLM() as server:
        configure("llm", base_url=server.url, api_key=server.api_key, model="scripted")
        assert healthz()[1]["model"] == "ok"
    # Stopped: the last probe stands for MODEL_CACHE_SECONDS, then the next one fails.
    assert healthz()[1]["model"] == "ok"
    health._last_probe = None
    assert healthz()[1]["model"] == "down"


def test_it_reports_a_model_that_refuses_the_key_down(configure):
    with ScriptedLLM(api_key="the-right-key") as server:
        configure("llm", base_url=server.url, api_key="a-wrong-key", model="scripted")
        status, body = healthz()
    assert (status, body["model"]) == (503, "down")


def test_it_reports_the_embedded_model_down_when_it_is_not_running():
    # No [llm] base_url and no embedded model started by `serve`.
    assert healthz()[1]["model"] == "down"


def test_it_checks_redis_when_there_is_one(settings, llm):
    redis_url = settings.REDIS_URL or "redis://127.0.0.1:6379/13"
    with socket.create_connection(("127.0.0.1", 6379), timeout=2):
        pass  # the machine's Redis answers
    settings.REDIS_URL = redis_url
    assert healthz()[1]["channels"] == "ok"
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    status, body = healthz()
    assert (status, body["channels"], body["db"]) == (503, "down", "ok")


def test_it_tells_anonymous_callers_only_names_and_states(configure, caplog):
    with ScriptedLLM(api_key="the-right-key") as server:
        configure("llm", base_url=server.url, api_key="a-wrong-key", model="scripted")
        response = Client().get("/healthz")
        Client().get("/healthz")
        url = server.url
    assert set(response.json().values()) <= {"ok", "down"}
    assert url not in response.content.decode()
    # Why goes to the log instead, once while it stays down.
    assert caplog.text.count("answered 401") == 1
