"""Health, metrics and JSON logs of real processes: daphne and a django-q2
cluster of the app (on the team profile, its PostgreSQL and Redis) and the
scripted LLM, as an operator's probes and Prometheus see them."""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from email.message import Message
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.programs import jobs
from tests.support.processes import (
    app_env,
    free_port,
    logged_in_chat,
    run_program,
    say,
    spawn_daphne,
    start_qcluster,
    stop_process,
    stop_process_group,
    wait_for_health,
)
from tests.support.scripted_llm import Reply, ScriptedLLM

TOKEN = "prometheus-token-0123456789abcdef"


class Stack(NamedTuple):
    env: dict[str, str]
    port: int
    cookie: str
    key: str
    llm: ScriptedLLM
    log: Path


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[Stack]:
    data_dir = tmp_path_factory.mktemp("monitoring")
    with ScriptedLLM() as llm:
        env = app_env(
            data_dir,
            NEOTASK_LLM_BASE_URL=llm.url,
            NEOTASK_LLM_API_KEY=llm.api_key,
            NEOTASK_LLM_MODEL="scripted",
            NEOTASK_SERVER_METRICS_TOKEN=TOKEN,
            NEOTASK_SERVER_LOG_FORMAT="json",
        )
        cookie, key = logged_in_chat(env, "ada", migrate=True)
        port = free_port()
        log = data_dir / "daphne.log"
        # As docs/deploy.md runs it with JSON logs: Neotask logs each request itself.
        with open(log, "w") as output:
            server = spawn_daphne(env, port, output, options=["--access-log", os.devnull])
        try:
            wait_for_health(port, server)
            yield Stack(env, port, cookie, key, llm, log)
        finally:
            stop_process(server)


@pytest.fixture
def cluster(stack: Stack, tmp_path: Path):
    process = start_qcluster(stack.env, open(tmp_path / "qcluster.log", "w"))  # noqa: SIM115
    try:
        yield process
    finally:
        stop_process_group(process)


def get(stack: Stack, path: str, **headers: str) -> tuple[int, Message, str]:
    """Status, headers (any case) and body."""
    request = urllib.request.Request(f"http://127.0.0.1:{stack.port}{path}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read().decode()


def health(stack: Stack) -> tuple[int, dict[str, str]]:
    status, _, body = get(stack, "/healthz")
    return status, json.loads(body)


def until_health(stack: Stack, expected: int, seconds: float = 30) -> dict[str, str]:
    deadline = time.monotonic() + seconds
    while True:
        status, body = health(stack)
        if status == expected or time.monotonic() > deadline:
            assert status == expected, body
            return body
        time.sleep(0.3)


def samples(stack: Stack) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, _, body = get(stack, "/metrics", Authorization=f"Bearer {TOKEN}")
    assert status == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }


def until_sample(stack: Stack, name: str, labels: dict[str, str], value: float) -> None:
    key = (name, tuple(sorted(labels.items())))
    deadline = time.monotonic() + 30
    while (found := samples(stack).get(key)) != value and time.monotonic() < deadline:
        time.sleep(0.3)
    assert found == value


def log_lines(stack: Stack) -> list[dict[str, Any]]:
    """Every line daphne logged, each of which must be a JSON object."""
    return [json.loads(line) for line in stack.log.read_text().splitlines() if line.strip()]


def test_it_is_healthy_with_every_part_up_and_counts_across_processes(stack, cluster):
    body = until_health(stack, 200)
    expected = {"db": "ok", "jobs": "ok", "model": "ok"}
    if stack.env.get("REDIS_URL"):
        expected["channels"] = "ok"
    assert body == expected
    assert samples(stack)[("neotask_check_up", (("check", "jobs"),))] == 1

    # A turn in daphne: counted, with its first token.
    stack.llm.script(Reply(text="Hello, Ada."))
    frames = asyncio.run(say(stack.port, stack.cookie, stack.key, "Hi, I am Ada."))
    assert frames[-1]["status"] == "completed"
    until_sample(stack, "neotask_turns_total", {"status": "completed"}, 1)
    assert samples(stack)[("neotask_first_token_seconds_count", ())] == 1

    # A job failing in the cluster's processes, seen from daphne's.
    run_program(stack.env, jobs.fail_one)
    until_sample(stack, "neotask_job_failures_total", {"job": "math.sqrt"}, 1)


def test_it_reports_the_job_cluster_down_once_it_stops(stack, cluster):
    until_health(stack, 200)
    stop_process_group(cluster)
    # Its status expires 3 s after its last save.
    body = until_health(stack, 503, seconds=15)
    assert body["jobs"] == "down"
    assert {state for name, state in body.items() if name != "jobs"} == {"ok"}


def test_it_logs_json_lines_with_the_request_and_chat_ids(stack):
    stack.llm.script(Reply(text="Logged."))
    asyncio.run(say(stack.port, stack.cookie, stack.key, "Log this turn."))
    status, headers, _ = get(stack, "/healthz", **{"X-Request-ID": "probe-42"})
    assert headers["X-Request-ID"] == "probe-42"
    # A made-up id is not trusted into the logs.
    assert get(stack, "/healthz", **{"X-Request-ID": "a b"})[1]["X-Request-ID"] != "a b"
    deadline = time.monotonic() + 10
    while not any(line.get("request_id") == "probe-42" for line in log_lines(stack)):
        assert time.monotonic() < deadline, stack.log.read_text()[-2000:]
        time.sleep(0.2)
    lines = log_lines(stack)
    request = next(line for line in lines if line.get("request_id") == "probe-42")
    assert request["event"] == "request"
    assert (request["method"], request["path"], request["status"]) == ("GET", "/healthz", status)
    turn = [line for line in lines if line["event"] == "turn" and line.get("chat") == stack.key]
    assert turn and turn[-1]["status"] == "completed"
    assert isinstance(turn[-1]["input_id"], int) and turn[-1]["first_token_seconds"] > 0
