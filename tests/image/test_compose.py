"""deploy/compose.yaml and deploy/compose.team.yaml, run by podman-compose.

Each test starts its own project (unique name, free ports), chats through the
published ports as a person would, recreates or restarts the Neotask containers
and finds the chat again, then removes everything with `down -v`. The compose
files say nothing of this host's runtime and limits (conftest.py): a
containers.conf of the test's own gives them to every podman podman-compose runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.ports import free_port
from tests.image.conftest import (
    REPO,
    Person,
    llm_url,
    podman,
    streamed_across,
    wait_healthy,
)
from tests.image.service_images import service_images
from tests.support.processes import say
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.websocket import streamed

DEPLOY = REPO / "deploy"


class Compose:
    """One podman-compose project: `podman-compose -p NAME -f FILE …` with ENV."""

    def __init__(self, file: Path, env: dict[str, str], conf: Path) -> None:
        self.file = file
        self.name = f"compose{uuid.uuid4().hex[:8]}"
        self.env = {**os.environ, "CONTAINERS_CONF": str(conf), **env}

    def __call__(self, *arguments: str, timeout: float = 300) -> str:
        done = subprocess.run(
            ["podman-compose", "-p", self.name, "-f", str(self.file), *arguments],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env,
        )
        # podman-compose 1.0.3 exits 0 whatever its podman commands did.
        assert done.returncode == 0, f"{arguments}: {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def container(self, service: str) -> str:
        return f"{self.name}_{service}_1"  # podman-compose's name for replica 1


@pytest.fixture
def project(containers_conf: Path) -> Iterator[Any]:
    """Makes Compose projects; each is taken down with its volumes afterwards."""
    made: list[Compose] = []

    def make(file: str, **env: str) -> Compose:
        made.append(Compose(DEPLOY / file, env, containers_conf))
        return made[-1]

    yield make
    for compose in made:
        compose("down", "-v", "--timeout", "5")
        # down -v leaves the project's network behind in podman-compose 1.0.3.
        podman("network", "rm", "--force", f"{compose.name}_default", check=False)


def until_checks(base: str, wanted: Any, seconds: float = 30) -> dict[str, str]:
    """/healthz's checks once `wanted(checks)` holds (whatever the status); {} if never."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            checks = httpx.get(f"{base}/healthz", headers={"Host": "localhost"}, timeout=5).json()
            if wanted(checks):
                return checks
        time.sleep(1)
    return {}


def started_at(container: str) -> str:
    return podman("inspect", "--format", "{{.State.StartedAt}}", container)


def chat_page(person: Person, key: str) -> str:
    page = person.client.get(f"/chat/{key}/")
    assert page.status_code == 200, page.text[:2000]
    return page.text


def test_one_person(image: str, scripted_llm: ScriptedLLM, project: Any) -> None:
    port = free_port()
    compose = project(
        "compose.yaml",
        NEOTASK_IMAGE=image,
        NEOTASK_PORT=str(port),
        NEOTASK_LLM_BASE_URL=llm_url(scripted_llm),
        NEOTASK_LLM_API_KEY=scripted_llm.api_key,
    )
    compose("up", "-d")
    base = f"http://127.0.0.1:{port}"
    container = compose.container("neotask")
    assert wait_healthy(base, logs=container) == {"db": "ok", "jobs": "ok", "model": "ok"}

    ada = Person(base)
    ada.set_up(podman("exec", container, "cat", "/data/setup_token"), "ada")
    key = ada.new_chat()
    scripted_llm.script(Reply(text="Hello from the compose file."))
    frames = asyncio.run(say(port, ada.cookie, key, "Are you there?"))
    assert streamed(frames) == "Hello from the compose file.", frames

    # A new container on the same volume: the account, the session and the chat stay.
    first = podman("inspect", "--format", "{{.Id}}", container)
    compose("down", "--timeout", "5")
    compose("up", "-d")
    assert podman("inspect", "--format", "{{.Id}}", container) != first
    wait_healthy(base, logs=container)
    page = chat_page(ada, key)
    assert "Are you there?" in page and "Hello from the compose file." in page


def test_a_team(image: str, scripted_llm: ScriptedLLM, project: Any) -> None:
    ports = free_port(), free_port()
    compose = project(
        "compose.team.yaml",
        **service_images(),
        NEOTASK_IMAGE=image,
        NEOTASK_WEB1_PORT=str(ports[0]),
        NEOTASK_WEB2_PORT=str(ports[1]),
        NEOTASK_LLM_BASE_URL=llm_url(scripted_llm),
        NEOTASK_LLM_API_KEY=scripted_llm.api_key,
        NEOTASK_SECRET_KEY=uuid.uuid4().hex * 2,
        POSTGRES_PASSWORD=uuid.uuid4().hex,
    )
    compose("up", "-d")
    bases = [f"http://127.0.0.1:{port}" for port in ports]
    for base, web in zip(bases, ("web1", "web2"), strict=True):
        # jobs ok on a --no-jobs replica: the worker's cluster answers on Redis.
        checks = wait_healthy(base, logs=compose.container(web))
        assert checks == {"db": "ok", "channels": "ok", "jobs": "ok", "model": "ok"}

    ada = Person(bases[0])
    ada.set_up(podman("exec", compose.container("web1"), "cat", "/data/setup_token"), "ada")
    key = ada.new_chat()
    scripted_llm.script(Reply(text="Streamed through Redis."))

    sent, seen = streamed_across(ports, ada.cookie, key, "Who hears this?")
    assert streamed(sent) == streamed(seen) == "Streamed through Redis.", (sent, seen)

    # The vector extension the migrations need, made by the database's own user.
    vector = podman(
        "exec", "--env", f"PGPASSWORD={compose.env['POSTGRES_PASSWORD']}",
        compose.container("postgres"), "psql", "-h", "127.0.0.1", "-U", "neotask", "-d",
        "neotask", "-tAc", "SELECT extname FROM pg_extension WHERE extname = 'vector'",
    )  # fmt: skip
    assert vector == "vector"

    # The replicas' jobs "ok" is the worker's cluster: stopped, it is missed.
    compose("stop", "--timeout", "10", "worker")
    assert until_checks(bases[0], lambda checks: checks.get("jobs") == "down")
    compose("start", "worker")

    webs = [compose.container("web1"), compose.container("web2")]
    before = [started_at(web) for web in webs]
    compose("restart", "web1", "web2")
    assert [started_at(web) for web in webs] != before
    for base, web in zip(bases, webs, strict=True):
        assert wait_healthy(base, logs=web)["jobs"] == "ok"  # the worker is back
    # The session made on web1 is good on web2 (one database, one secret key).
    ada.client.base_url = httpx.URL(bases[1])
    page = chat_page(ada, key)
    assert "Who hears this?" in page and "Streamed through Redis." in page
