"""The container image, run by podman (`make test-image`, docs/deploy.md).

These tests start real containers from dist/neotask-<version>.tar: minutes, and
podman with root, so `make test` skips them; `make test-image` builds the image
and sets NEOTASK_TEST_IMAGE to the folder holding it. Podman runs with runc and
explicit limits: crun fails on some kernels' cgroups, and a container may not
raise its limits above the host's here.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import time
import tomllib
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.processes import chat_socket, message_frame, until_done
from tests.support.scripted_llm import ScriptedLLM

REPO = Path(__file__).resolve().parents[2]
DIST = os.environ.get("NEOTASK_TEST_IMAGE", "")
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
TAG = f"localhost/neotask:{VERSION}"
#: What every `podman run` here adds (and the compose and kube tests pass on).
RUNTIME = ["--runtime", "runc"]
LIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"]
PASSWORD = "a long enough password 42"


def pytest_collection_modifyitems(items):
    for item in items:
        if "/image/" in str(item.path):
            item.add_marker(pytest.mark.slow)
            if not DIST:
                item.add_marker(pytest.mark.skip(reason="make test-image runs these (podman)"))


def podman(*arguments: str, timeout: float = 300, check: bool = True) -> str:
    """podman's output; its errors in the failure."""
    done = subprocess.run(["podman", *arguments], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode:
        raise AssertionError(f"podman {' '.join(arguments)}: {done.returncode}\n{done.stderr}")
    return done.stdout.strip()


@pytest.fixture
def containers_conf(tmp_path: Path) -> Path:
    """RUNTIME and LIMITS as podman's defaults, for what runs podman for us
    (podman-compose, kube play, which has no --ulimit): CONTAINERS_CONF names it."""
    limits = ", ".join(f'"{limit}"' for limit in LIMITS[1::2])
    conf = tmp_path / "containers.conf"
    conf.write_text(
        f'[containers]\ndefault_ulimits = [{limits}]\n[engine]\nruntime = "{RUNTIME[1]}"\n'
    )
    return conf


@pytest.fixture(scope="session")
def image() -> str:
    """The image of dist/, loaded into podman's store: its tag."""
    archive = Path(DIST) / f"neotask-{VERSION}.tar"
    assert archive.exists(), f"{archive} is missing: make image builds it"
    podman("load", "--quiet", "--input", str(archive))
    return TAG


@pytest.fixture
def scripted_llm() -> Iterator[ScriptedLLM]:
    """The scripted model, reachable from containers: on every address of this
    host (a container on podman's bridge reaches it as host.containers.internal)."""
    with ScriptedLLM(host="0.0.0.0") as llm:
        yield llm


def llm_url(llm: ScriptedLLM, host: str = "host.containers.internal") -> str:
    return f"http://{host}:{llm.server.server_address[1]}/v1"


@pytest.fixture
def names() -> Iterator[Any]:
    """Unique names for containers, volumes and pods; all removed afterwards."""
    made: list[tuple[str, str]] = []

    def name(kind: str) -> str:
        made.append((kind, f"neotask-test-{uuid.uuid4().hex[:8]}"))
        return made[-1][1]

    yield name
    for kind, made_name in reversed(made):
        if kind == "container":
            podman("rm", "--force", "--time", "5", made_name, check=False)
        elif kind == "volume":
            podman("volume", "rm", "--force", made_name, check=False)
        elif kind == "pod":
            podman("pod", "rm", "--force", made_name, check=False)


def wait_healthy(base: str, seconds: float = 180, logs: str = "") -> dict[str, str]:
    """/healthz's checks once it answers 200; the container's logs if it never does."""
    deadline = time.monotonic() + seconds
    last: Any = None
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            last = httpx.get(f"{base}/healthz", headers={"Host": "localhost"}, timeout=5)
            if last.status_code == 200:
                return last.json()
        time.sleep(1)
    tail = podman("logs", "--tail", "60", logs, check=False) if logs else ""
    raise AssertionError(f"{base}/healthz: {getattr(last, 'text', last)}\n{tail}")


class Person:
    """Someone at a browser, without one: pages, forms with their CSRF token, the
    session cookie for the chat's websocket."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.client = httpx.Client(base_url=base, follow_redirects=True, timeout=30)

    def form(self, path: str, **fields: str) -> httpx.Response:
        page = self.client.get(path)
        assert page.status_code == 200, page.text[:2000]
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert token, page.text[:2000]
        return self.client.post(
            path,
            data={"csrfmiddlewaretoken": token.group(1), **fields},
            headers={"Referer": f"{self.base}{path}"},
        )

    def set_up(self, token: str, username: str) -> None:
        """First run: the admin account, with the token the container printed."""
        done = self.form(
            f"/setup/?token={token}",
            token=token,
            username=username,
            password1=PASSWORD,
            password2=PASSWORD,
        )
        assert done.status_code == 200 and "/setup/model/" in str(done.url), done.text[:2000]

    def sign_in(self, username: str) -> None:
        done = self.form("/accounts/login/", username=username, password=PASSWORD)
        assert "sessionid" in self.client.cookies, done.text[:2000]

    def new_chat(self) -> str:
        page = self.client.post("/chat/new/", headers=self.csrf_headers())
        key = re.search(r"/chat/([^/]+)/$", str(page.url))
        assert key, str(page.url)
        return key.group(1)

    def csrf_headers(self) -> dict[str, str]:
        return {"X-CSRFToken": self.client.cookies.get("csrftoken") or "", "Referer": self.base}

    @property
    def cookie(self) -> str:
        return self.client.cookies["sessionid"]


def chat_url(base: str, key: str) -> str:
    return base.replace("http://", "ws://") + f"/ws/chat/{key}/"


def streamed_across(ports: Sequence[int], cookie: str, key: str, text: str) -> tuple[Any, Any]:
    """The frames of one turn sent on the first replica, and those a second tab on the
    other replica saw (the channel layer's fan-out through Redis)."""

    async def turn() -> tuple[Any, Any]:
        async with (
            chat_socket(ports[1], cookie, key) as watcher,
            chat_socket(ports[0], cookie, key) as writer,
        ):
            await writer.send(message_frame(text))
            return await until_done(writer), await until_done(watcher)

    return asyncio.run(turn())
