"""deploy/kubernetes/embedded/ played by `podman kube play` (docs/deploy.md).

The committed manifests, as an admin applies them, with only what this host
needs changed: unique names, the image under test, the scripted model's address
and a hostPort. What podman 4.3's kube play does with them:

- Deployment: one pod, `<name>-pod-0`, its container `<name>-pod-0-<container>`;
  replicas and strategy are not looked at.
- PersistentVolumeClaim: a named volume of the claim's name, which `kube down`
  keeps. Playing it again fails ("volume already exists"), so the second play
  leaves the claim out: the pod mounts the volume that is there.
- Secret: stored as a podman secret holding the Secret's YAML, which envFrom and
  secretKeyRef then read as JSON (a map of base64 values) and refuse. So the test
  creates that JSON secret itself from the manifest's stringData.
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
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.image.conftest import LIMITS, REPO, Person, llm_url, podman, wait_healthy
from tests.support.processes import free_port, say
from tests.support.scripted_llm import Reply, ScriptedLLM

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
    """One kube play of the embedded manifests, under a name of its own."""

    def __init__(self, image: str, llm: ScriptedLLM, conf: Path) -> None:
        self.name = f"neotask-kube-{uuid.uuid4().hex[:8]}"
        self.port = free_port()
        self.env = {**os.environ, "CONTAINERS_CONF": str(conf)}
        self.objects = copy.deepcopy(manifests("embedded"))
        deployment = kind(self.objects, "Deployment")
        secret = kind(self.objects, "Secret")
        claim = kind(self.objects, "PersistentVolumeClaim")
        spec = deployment["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        (volume,) = spec["volumes"]
        for item in (deployment, secret, claim):
            item["metadata"]["name"] = f"{self.name}-{item['kind'].lower()}"
        volume["persistentVolumeClaim"]["claimName"] = claim["metadata"]["name"]
        (source,) = container["envFrom"]
        source["secretRef"]["name"] = secret["metadata"]["name"]
        container["image"] = image
        container["env"].append({"name": "NEOTASK_LLM_BASE_URL", "value": llm_url(llm)})
        container["ports"][0]["hostPort"] = self.port
        secret["stringData"]["NEOTASK_LLM_API_KEY"] = llm.api_key  # the secret reaches the app
        self.secret = secret
        self.volume = claim["metadata"]["name"]
        self.pod = f"{deployment['metadata']['name']}-pod-0"
        self.container = f"{self.pod}-{container['name']}"
        self.base = f"http://127.0.0.1:{self.port}"

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

    def play(self, *, claim: bool) -> None:
        """kube play the manifests without the Secret (made here) and, when the
        volume exists already, without the claim."""
        skipped = {"Secret"} | (set() if claim else {"PersistentVolumeClaim"})
        played = [item for item in self.objects if item["kind"] not in skipped]
        self.podman("kube", "play", "-", stdin=yaml.safe_dump_all(played))

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

    def remove(self) -> None:
        self.down()
        self.podman("volume", "rm", "--force", self.volume, check=False)
        self.podman("secret", "rm", self.secret["metadata"]["name"], check=False)


@pytest.fixture
def containers_conf(tmp_path: Path) -> Path:
    """kube play has no --ulimit: the limits every podman run here passes, as defaults."""
    limits = ", ".join(f'"{limit}"' for limit in LIMITS[1::2])
    conf = tmp_path / "containers.conf"
    conf.write_text(f'[containers]\ndefault_ulimits = [{limits}]\n[engine]\nruntime = "runc"\n')
    return conf


@pytest.fixture
def kube(image: str, scripted_llm: ScriptedLLM, containers_conf: Path) -> Iterator[Play]:
    play = Play(image, scripted_llm, containers_conf)
    play.make_secret()
    try:
        yield play
    finally:
        play.remove()


def test_embedded_manifests_keep_a_chat_across_kube_down_and_play(
    kube: Play, scripted_llm: ScriptedLLM
) -> None:
    kube.play(claim=True)
    checks = wait_healthy(kube.base, 300, logs=kube.container)
    # The model check passes only with the key the Secret carried (the scripted
    # model refuses others), so envFrom reached the app.
    assert checks["model"] == "ok", checks
    assert podman("exec", kube.container, "id", "-u") == "10001"  # runAsUser

    token = podman("exec", kube.container, "cat", "/data/setup_token")
    person = Person(kube.base)
    person.set_up(token, "admin")
    key = person.new_chat()
    scripted_llm.script(Reply(text="Kept on the claim's volume."))
    frames = asyncio.run(say(kube.port, person.cookie, key, "Remember this pod?"))
    assert frames[-1]["status"] == "completed", frames
    assert "".join(f["text"] for f in frames if f["type"] == "delta") == (
        "Kept on the claim's volume."
    )

    kube.down()
    assert subprocess.run(["podman", "pod", "exists", kube.pod]).returncode == 1
    assert kube.volume in podman("volume", "ls", "--format", "{{.Name}}").split()
    kube.play(claim=False)
    wait_healthy(kube.base, 300, logs=kube.container)
    again = Person(kube.base)
    again.sign_in("admin")
    page = again.client.get(f"/chat/{key}/")
    assert page.status_code == 200
    assert "Remember this pod?" in page.text and "Kept on the claim" in page.text
