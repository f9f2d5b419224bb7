"""deploy/kubernetes/'s manifests hang together: what `kubectl apply -f` would only
show in a cluster (a claim, a Secret or a port named wrong, a probe the hosts
refuse). tests/image/test_kubernetes.py plays the embedded one for real."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")

REPO = Path(__file__).resolve().parents[1]
MANIFESTS = REPO / "deploy" / "kubernetes"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
IMAGE_USER = 10001  # deploy/image/build.py's UID
PORT = 8000  # the image's NEOTASK_PORT


def objects(variant: str) -> dict[tuple[str, str], dict[str, Any]]:
    """(kind, name) → object, for every file of deploy/kubernetes/VARIANT/."""
    found = {}
    for path in sorted((MANIFESTS / variant).glob("*.yaml")):
        for item in yaml.safe_load_all(path.read_text()):
            key = (item["kind"], item["metadata"]["name"])
            assert key not in found, f"{path.name}: {key} twice"
            found[key] = item
    return found


def of_kind(found: dict[tuple[str, str], dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [item for (k, _), item in found.items() if k == kind]


def containers(deployment: dict[str, Any]) -> list[dict[str, Any]]:
    return deployment["spec"]["template"]["spec"]["containers"]


def by_name(found, variant: str, kind: str, name: str) -> dict[str, Any]:
    assert (kind, name) in found, f"{variant}: no {kind} {name!r}"
    return found[(kind, name)]


def env_of(found, container: dict[str, Any]) -> dict[str, str]:
    """The container's environment as its Secrets, ConfigMaps and env give it."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "secretRef" in source:
            env |= by_name(found, "", "Secret", source["secretRef"]["name"])["stringData"]
        else:
            env |= by_name(found, "", "ConfigMap", source["configMapRef"]["name"])["data"]
    return env | {item["name"]: item["value"] for item in container.get("env", [])}


@pytest.mark.parametrize("variant", ["embedded", "team"])
def test_every_reference_names_an_object_of_the_variant(variant):
    found = objects(variant)
    deployments = of_kind(found, "Deployment")
    assert deployments
    for deployment in deployments:
        template = deployment["spec"]["template"]
        assert deployment["spec"]["selector"]["matchLabels"].items() <= (
            template["metadata"]["labels"].items()
        )
        security = template["spec"]["securityContext"]
        assert security["runAsNonRoot"] is True
        assert security["runAsUser"] == security["fsGroup"] == IMAGE_USER
        for volume in template["spec"]["volumes"]:
            claim = volume["persistentVolumeClaim"]["claimName"]
            by_name(found, variant, "PersistentVolumeClaim", claim)
        (container,) = containers(deployment)
        assert container["image"] == f"localhost/neotask:{VERSION}"
        assert {"cpu", "memory"} <= container["resources"]["limits"].keys()
        env_of(found, container)  # every Secret and ConfigMap it names exists
    for service in of_kind(found, "Service"):
        (port,) = service["spec"]["ports"]
        served = [
            d
            for d in deployments
            if service["spec"]["selector"].items()
            <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert served, service["metadata"]["name"]
        for deployment in served:
            (container,) = containers(deployment)
            assert {"name": port["targetPort"], "containerPort": PORT} in container["ports"]


@pytest.mark.parametrize("variant", ["embedded", "team"])
def test_the_web_probes_ask_healthz_as_a_host_the_app_allows(variant):
    found = objects(variant)
    webs = [
        d
        for d in of_kind(found, "Deployment")
        if d["spec"]["template"]["spec"]["containers"][0].get("ports")
    ]
    assert webs
    for deployment in webs:
        (container,) = containers(deployment)
        probes = {
            kind: container[f"{kind}Probe"]["httpGet"]
            for kind in ("startup", "liveness", "readiness")
        }
        # Liveness asks only whether the process answers: a model that is down
        # must not restart the pod. Readiness wants every part.
        assert probes["liveness"]["path"] == "/healthz?live"
        assert probes["readiness"]["path"] == "/healthz?live"  # not a shared part's state
        allowed = env_of(found, container)["NEOTASK_ALLOWED_HOSTS"].split(",")
        for probe in probes.values():
            assert probe["port"] == "http"
            (header,) = probe["httpHeaders"]
            assert header["name"] == "Host" and header["value"] in allowed
        startup = container["startupProbe"]
        # First start migrates (and, embedded, prepares the model): minutes.
        assert startup["periodSeconds"] * startup["failureThreshold"] >= 300


def test_embedded_is_one_pod_replaced_not_rolled():
    found = objects("embedded")
    (deployment,) = of_kind(found, "Deployment")
    # SQLite and a ReadWriteOnce volume: never two pods on the same database.
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    (claim,) = of_kind(found, "PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    (container,) = containers(deployment)
    assert container["args"] == ["web"]
    assert "DATABASE_URL" not in env_of(found, container)


def test_team_runs_web_replicas_beside_a_worker_on_shared_services():
    found = objects("team")
    web = by_name(found, "team", "Deployment", "neotask-web")
    worker = by_name(found, "team", "Deployment", "neotask-worker")
    assert web["spec"]["replicas"] == 2
    assert containers(web)[0]["args"] == ["web", "--no-jobs"]
    assert containers(worker)[0]["args"] == ["worker"]
    assert "ports" not in containers(worker)[0]  # the cluster serves no HTTP
    for deployment in (web, worker):
        env = env_of(found, containers(deployment)[0])
        assert env["DATABASE_URL"].startswith("postgresql://")
        assert env["REDIS_URL"].startswith("redis://")
        assert {"NEOTASK_SECRET_KEY", "NEOTASK_LLM_BASE_URL"} <= env.keys()
    # Workspaces and uploads are files every pod reads: one volume for all.
    (claim,) = of_kind(found, "PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
