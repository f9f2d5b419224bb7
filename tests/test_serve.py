"""`manage.py serve` (what `make run` starts): real processes, a real port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.processes import ROOT, app_env, free_port, spawn_serve, wait_for_health

pytestmark = pytest.mark.slow


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def env(tmp_path):
    env = app_env(tmp_path)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True
    )
    return env


def test_it_serves_the_app_and_stops_everything_on_ctrl_c(env):
    port = free_port()
    server = spawn_serve(env, port, jobs=True, output=True)
    try:
        wait_for_health(port, server)
        # First run: the page that creates the admin account.
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
            assert r.url.endswith("/setup/")
            assert b"Create the admin account" in r.read()
        # The job cluster is one of the children.
        children = subprocess.run(
            ["ps", "-o", "pid=,args=", "--ppid", str(server.pid)], capture_output=True, text=True
        ).stdout
        assert "web_server" in children and "qcluster" in children and "local_llm" in children
        # The web server runs on uvloop's event loop (neotask_site/web_server.py).
        [web] = [line.split()[0] for line in children.splitlines() if "web_server" in line]
        assert "uvloop/loop." in (Path("/proc") / web / "maps").read_text()

        server.send_signal(signal.SIGINT)
        assert server.wait(timeout=30) == 0
        deadline = time.monotonic() + 15
        while group_alive(server.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not group_alive(server.pid), "a child process outlived Ctrl-C"
        assert "Neotask stopped." in server.stdout.read()
    finally:
        if group_alive(server.pid):
            os.killpg(server.pid, signal.SIGKILL)


def test_it_explains_a_port_in_use(env):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "manage.py", "serve", "--port", str(port)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode != 0
    assert f"Port {port} on 127.0.0.1 is already in use" in result.stderr
    assert "Traceback" not in result.stderr


def test_it_keeps_serving_when_the_embedded_model_cannot_start(env, tmp_path):
    port = free_port()
    env = {**env, "NEOTASK_LLM_LOCAL_MODEL_PATH": str(tmp_path / "missing.gguf")}
    server = spawn_serve(env, port, output=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "local_llm.error").exists():
            assert time.monotonic() < deadline and server.poll() is None
            time.sleep(0.2)
        wait_for_health(port, server)
        assert server.poll() is None
        assert "no model file" in (tmp_path / "local_llm.error").read_text()
        server.send_signal(signal.SIGINT)
        assert server.wait(timeout=30) == 0
        assert "The embedded model stopped" in server.stdout.read()
    finally:
        if group_alive(server.pid):
            os.killpg(server.pid, signal.SIGKILL)


def test_it_runs_the_job_cluster_at_a_lower_priority(env):
    from neotask_site.management.commands.serve import JOB_CLUSTER_NICE

    port = free_port()
    env = {**env, "NEOTASK_LLM_BASE_URL": "http://127.0.0.1:9/v1"}  # no embedded model
    server = spawn_serve(env, port, jobs=True)
    try:
        wait_for_health(port, server)
        deadline = time.monotonic() + 60
        while True:
            listed = subprocess.run(
                ["ps", "-o", "ni=,args=", "-s", str(server.pid)], capture_output=True, text=True
            ).stdout.splitlines()
            processes = [(int(ni), args) for ni, args in (line.split(None, 1) for line in listed)]
            cluster = [ni for ni, args in processes if "qcluster" in args]
            # The cluster's own process and the workers it forks, which inherit its niceness.
            if len(cluster) >= 3 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        # Niceness adds up: relative to serve's own (0 unless the suite runs under nice).
        [own] = [ni for ni, args in processes if " serve " in f"{args} "]
        assert len(cluster) >= 3 and set(cluster) == {min(own + JOB_CLUSTER_NICE, 19)}, processes
        assert [ni for ni, args in processes if "web_server" in args] == [own], processes
    finally:
        if group_alive(server.pid):
            os.killpg(server.pid, signal.SIGKILL)


@pytest.mark.parametrize("verbose", [False, True])
def test_it_logs_requests_and_the_job_clusters_info_only_when_verbose(env, verbose):
    """`make run` is quiet: no line per request nor the job cluster's INFO lines
    unless `serve --verbose` ([server] verbose); warnings and errors always show."""
    port = free_port()
    env = {**env, "NEOTASK_LLM_BASE_URL": "http://127.0.0.1:9/v1"}  # no embedded model
    extra = ["--verbose"] if verbose else []
    server = spawn_serve(env, port, *extra, jobs=True, output=True)
    try:
        wait_for_health(port, server)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/setup/", timeout=5) as r:
            assert r.status == 200  # first run: the page that creates the admin account
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the cluster and its workers are up
            listed = subprocess.run(
                ["ps", "-o", "args=", "-s", str(server.pid)], capture_output=True, text=True
            ).stdout
            if listed.count("qcluster") >= 3:
                break
            time.sleep(0.5)
        server.send_signal(signal.SIGINT)
        assert server.wait(timeout=30) == 0
        output = server.stdout.read()
    finally:
        if group_alive(server.pid):
            os.killpg(server.pid, signal.SIGKILL)
    assert "Neotask is running at" in output
    assert ('"GET /setup/" 200' in output) == verbose, output
    assert ("Q Cluster" in output) == verbose, output
