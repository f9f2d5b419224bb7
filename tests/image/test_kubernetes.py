"""deploy/kubernetes/'s manifests played by `podman kube play` (docs/deploy.md).

The committed manifests, as an admin applies them, with only what this host
needs changed: unique names, the image under test, the scripted model's address
and key, hostPorts; for the team, the services' addresses and plain HTTP.
What podman 4.3's kube play does with them:

- Deployment: `replicas` pods, `<name>-pod-<n>`, their containers
  `<name>-pod-<n>-<container>`, on podman's bridge network (or --network's).
  Every replica publishes the same hostPort, so all but the first fail to start:
  the team test plays web's two replicas as two Deployments of one pod each.
- PersistentVolumeClaim: a named volume of the claim's name, which `kube down`
  keeps. Playing it again fails ("volume already exists"), so the second play
  leaves the claim out: the pod mounts the volume that is there.
- Secret: stored as a podman secret holding the Secret's YAML, which envFrom and
  secretKeyRef then read as JSON (a map of base64 values) and refuse. So the test
  creates that JSON secret itself from the manifest's stringData.
- envFrom (ConfigMap, Secret) overrides env, the other way round from Kubernetes;
  a ConfigMap in the same YAML is read.
- Probes: the liveness probe becomes a healthcheck that curls `localhost:0` (a
  named port is not resolved; the image has no curl), which nothing runs here (no
  systemd timers); startup and readiness probes are ignored.
- A containerPort without hostPort is published on the host's same port, so the
  test always sets a free hostPort. Services are ignored.
- No --ulimit: containers.conf's default_ulimits (CONTAINERS_CONF) set them.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.image.conftest import (
    LIMITS,
    REPO,
    RUNTIME,
    Person,
    llm_url,
    podman,
    streamed_across,
    wait_healthy,
)
from tests.image.service_images import service_images
from tests.support.processes import free_port, say
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.websocket import streamed

yaml = pytest.importorskip("yaml")

MANIFESTS = REPO / "deploy" / "kubernetes"


def manifests(variant: str) -> list[dict[str, Any]]:
    """Every object of deploy/kubernetes/VARIANT/, in file name order."""
    found = []
    for path in sorted((MANIFESTS / variant).glob("*.yaml")):
        found += [item for item in yaml.safe_load_all(path.read_text()) if item]
    return found


def kind(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (found,) = [item for item in objects if item["kind"] == name]
    return found


class Play:
    """One kube play of deploy/kubernetes/VARIANT/, its objects renamed to be its own."""

    def __init__(self, variant: str, image: str, conf: Path, *options: str) -> None:
        self.name = f"kube{uuid.uuid4().hex[:8]}"
        self.options = options
        self.env = {**os.environ, "CONTAINERS_CONF": str(conf)}
        self.objects = copy.deepcopy(manifests(variant))
        for item in self.objects:
            item["metadata"]["name"] = f"{self.name}-{item['metadata']['name']}"
        self.secret = kind(self.objects, "Secret")
        self.ports: dict[str, int] = {}  # Deployment's name in the manifests → hostPort
        self.containers: dict[str, str] = {}  # … → its container's name in podman
        for deployment in (item for item in self.objects if item["kind"] == "Deployment"):
            spec = deployment["spec"]["template"]["spec"]
            for volume in spec["volumes"]:
                volume["persistentVolumeClaim"]["claimName"] = self.renamed(
                    volume["persistentVolumeClaim"]["claimName"]
                )
            (container,) = spec["containers"]
            for source in container["envFrom"]:
                for reference in source.values():
                    reference["name"] = self.renamed(reference["name"])
            container["image"] = image
            container.setdefault("env", [])
            named = deployment["metadata"]["name"].removeprefix(f"{self.name}-")
            self.containers[named] = f"{deployment['metadata']['name']}-pod-0-{container['name']}"
            for port in container.get("ports", []):
                port["hostPort"] = self.ports[named] = free_port()

    def replicate(self, named: str, copy_name: str) -> None:
        """The Deployment NAMED's second replica as a Deployment of its own, with a
        hostPort of its own (replicas of one Deployment would share one)."""
        (original,) = [
            item for item in self.objects if item["metadata"]["name"] == self.renamed(named)
        ]
        assert original["spec"]["replicas"] == 2
        original["spec"]["replicas"] = 1
        twin = copy.deepcopy(original)
        twin["metadata"]["name"] = self.renamed(copy_name)
        (container,) = twin["spec"]["template"]["spec"]["containers"]
        self.containers[copy_name] = f"{self.renamed(copy_name)}-pod-0-{container['name']}"
        for port in container["ports"]:
            port["hostPort"] = self.ports[copy_name] = free_port()
        self.objects.append(twin)

    def renamed(self, name: str) -> str:
        return f"{self.name}-{name}"

    def set_env(self, **values: str) -> None:
        """Every container's env (below what envFrom gives, in podman)."""
        for item in self.objects:
            if item["kind"] == "Deployment":
                (container,) = item["spec"]["template"]["spec"]["containers"]
                container["env"] += [{"name": k, "value": v} for k, v in values.items()]

    def podman(self, *arguments: str, stdin: str = "", check: bool = True) -> str:
        done = subprocess.run(
            ["podman", *arguments],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=300,
            env=self.env,
        )
        if check and done.returncode:
            raise AssertionError(f"podman {' '.join(arguments)}: {done.returncode}\n{done.stderr}")
        return done.stdout

    def play(self, *, claim: bool = True) -> None:
        """kube play the manifests without the Secret (made here) and, when the
        volume exists already, without the claim."""
        if claim:
            self.make_secret()
        skipped = {"Secret"} | (set() if claim else {"PersistentVolumeClaim"})
        played = [item for item in self.objects if item["kind"] not in skipped]
        self.podman("kube", "play", *self.options, "-", stdin=yaml.safe_dump_all(played))

    def down(self) -> None:
        self.podman("kube", "down", "-", stdin=yaml.safe_dump_all(self.objects), check=False)

    def make_secret(self) -> None:
        values = {
            key: base64.b64encode(value.encode()).decode()
            for key, value in self.secret["stringData"].items()
        }
        self.podman(
            "secret", "create", self.secret["metadata"]["name"], "-", stdin=json.dumps(values)
        )

    def volumes(self) -> list[str]:
        return [
            item["metadata"]["name"]
            for item in self.objects
            if item["kind"] == "PersistentVolumeClaim"
        ]

    def remove(self) -> None:
        self.down()
        for volume in self.volumes():
            self.podman("volume", "rm", "--force", volume, check=False)
        self.podman("secret", "rm", self.secret["metadata"]["name"], check=False)


@pytest.fixture
def plays(image: str, containers_conf: Path) -> Iterator[Any]:
    """Plays of the manifests; all taken down, their volumes and secrets removed."""
    made: list[Play] = []

    def play(variant: str, *options: str) -> Play:
        made.append(Play(variant, image, containers_conf, *options))
        return made[-1]

    yield play
    for each in reversed(made):
        each.remove()


def test_embedded_manifests_keep_a_chat_across_kube_down_and_play(
    plays: Any, scripted_llm: ScriptedLLM
) -> None:
    kube = plays("embedded")
    kube.set_env(NEOTASK_LLM_BASE_URL=llm_url(scripted_llm))
    kube.secret["stringData"]["NEOTASK_LLM_API_KEY"] = scripted_llm.api_key
    kube.play()
    container, port = kube.containers["neotask"], kube.ports["neotask"]
    base = f"http://127.0.0.1:{port}"
    checks = wait_healthy(base, 300, logs=container)
    # The model check passes only with the key the Secret carried (the scripted
    # model refuses others), so envFrom reached the app.
    assert checks["model"] == "ok", checks
    assert podman("exec", container, "id", "-u") == "10001"  # runAsUser

    token = podman("exec", container, "cat", "/data/setup_token")
    person = Person(base)
    person.set_up(token, "admin")
    key = person.new_chat()
    scripted_llm.script(Reply(text="Kept on the claim's volume."))
    frames = asyncio.run(say(port, person.cookie, key, "Remember this pod?"))
    assert frames[-1]["status"] == "completed", frames
    assert streamed(frames) == "Kept on the claim's volume."

    kube.down()
    pod = container.removesuffix("-neotask")
    assert subprocess.run(["podman", "pod", "exists", pod]).returncode == 1
    assert set(kube.volumes()) <= set(podman("volume", "ls", "--format", "{{.Name}}").split())
    kube.play(claim=False)
    wait_healthy(base, 300, logs=container)
    again = Person(base)
    again.sign_in("admin")
    page = again.client.get(f"/chat/{key}/")
    assert page.status_code == 200
    assert "Remember this pod?" in page.text and "Kept on the claim" in page.text


@pytest.fixture
def services() -> Iterator[tuple[str, str, str]]:
    """PostgreSQL with pgvector and Redis on a network of their own: (network,
    DATABASE_URL, REDIS_URL), as the team's Secret names them."""
    images = service_images()  # built here from Debian's packages: no registry
    name = f"kube{uuid.uuid4().hex[:8]}"
    password = uuid.uuid4().hex
    podman("network", "create", name)
    run = ["run", "--detach", "--network", name, *RUNTIME, *LIMITS]
    try:
        podman(
            *run,
            *("--name", f"{name}-postgres", "--env", "POSTGRES_USER=neotask"),
            *("--env", f"POSTGRES_PASSWORD={password}", "--env", "POSTGRES_DB=neotask"),
            images["NEOTASK_POSTGRES_IMAGE"],
        )
        podman(*run, "--name", f"{name}-redis", images["NEOTASK_REDIS_IMAGE"])
        ready = ["exec", f"{name}-postgres", "pg_isready", "-h", "127.0.0.1", "-U", "neotask"]
        deadline = time.monotonic() + 60
        while subprocess.run(["podman", *ready], capture_output=True).returncode:
            assert time.monotonic() < deadline, podman("logs", f"{name}-postgres", check=False)
            time.sleep(1)
        yield (
            name,
            f"postgresql://neotask:{password}@{name}-postgres:5432/neotask",
            f"redis://{name}-redis:6379/0",
        )
    finally:
        for service in ("postgres", "redis"):
            podman("rm", "--force", "--time", "5", f"{name}-{service}", check=False)
        podman("network", "rm", "--force", name, check=False)


def test_team_manifests_stream_a_chat_across_web_pods_with_a_worker(
    services: tuple[str, str, str], plays: Any, scripted_llm: ScriptedLLM
) -> None:
    # services before plays: the pods go down before the network they are on.
    network, database, redis = services
    kube = plays("team", "--network", network)
    kube.secret["stringData"] |= {
        "DATABASE_URL": database,
        "REDIS_URL": redis,
        "NEOTASK_LLM_API_KEY": scripted_llm.api_key,
    }
    # Plain HTTP to 127.0.0.1 here, where the ConfigMap says an HTTPS host name.
    # In the ConfigMap itself: podman gives envFrom the last word over env.
    kind(kube.objects, "ConfigMap")["data"] |= {
        "NEOTASK_LLM_BASE_URL": llm_url(scripted_llm),
        "NEOTASK_HTTPS": "false",
        "NEOTASK_ALLOWED_HOSTS": "localhost,127.0.0.1",
        "NEOTASK_CSRF_TRUSTED_ORIGINS": "",
    }
    kube.replicate("neotask-web", "neotask-web-2")
    kube.play()
    ports = [kube.ports["neotask-web"], kube.ports["neotask-web-2"]]
    webs = [kube.containers["neotask-web"], kube.containers["neotask-web-2"]]
    bases = [f"http://127.0.0.1:{port}" for port in ports]
    for base, web in zip(bases, webs, strict=True):
        # jobs ok on a --no-jobs pod: the worker pod's cluster answers on Redis.
        checks = wait_healthy(base, 300, logs=web)
        assert checks == {"db": "ok", "channels": "ok", "jobs": "ok", "model": "ok"}
    # One volume for every pod: the key generated by the first to start (the
    # Secret leaves it empty) is the one all sign with.
    keys = {podman("exec", c, "cat", "/data/secret_key") for c in kube.containers.values()}
    assert len(keys) == 1, keys

    ada = Person(bases[0])
    ada.set_up(podman("exec", webs[0], "cat", "/data/setup_token"), "ada")
    key = ada.new_chat()
    scripted_llm.script(Reply(text="Streamed through Redis."))

    sent, seen = streamed_across(ports, ada.cookie, key, "Who hears this?")
    assert streamed(sent) == streamed(seen) == "Streamed through Redis.", (sent, seen)
    # The session made on one pod is good on the other (one database, one key).
    ada.client.base_url = httpx.URL(bases[1])
    page = ada.client.get(f"/chat/{key}/")
    assert page.status_code == 200
    assert "Who hears this?" in page.text and "Streamed through Redis." in page.text
