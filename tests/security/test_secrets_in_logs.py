"""No token in the logs (L9): daphne's own access log shows secret query
parameters' values as REDACTED (monitoring/logs.py), and `serve` prints the
first-run link with its token to a terminal only. On main a live daphne's
access log held `GET /setup/?token=<the token>` and the single sign-on callback's
code and state, and `serve`'s output to a pipe (a journal) held the token."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from monitoring.logs import without_secrets
from tests.support.processes import (
    ROOT,
    app_env,
    free_port,
    manage,
    spawn_serve,
    stop_process,
    wait_for_health,
)


@pytest.mark.parametrize(
    ("uri", "logged"),
    [
        ("/setup/?token=s3cret", "/setup/?token=REDACTED"),
        (
            "/accounts/oidc/callback/?code=abc&state=xyz&session_state=q",
            "/accounts/oidc/callback/?code=REDACTED&state=REDACTED&session_state=REDACTED",
        ),
        ("/v1/models?api_key=k&Key=K2&page=2", "/v1/models?api_key=REDACTED&Key=REDACTED&page=2"),
        ("/chats/?page=2&q=a%20b", "/chats/?page=2&q=a%20b"),  # nothing secret: as it came
        ("/healthz", "/healthz"),
    ],
)
def test_it_redacts_secret_query_parameters(uri, logged):
    assert without_secrets(uri) == logged


@pytest.mark.slow
def test_daphnes_access_log_holds_no_token(tmp_path):
    env = app_env(tmp_path)
    manage(env, "migrate", "-v0")
    port, access_log = free_port(), tmp_path / "access.log"
    command = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port)]
    command += ["--access-log", str(access_log), "neotask_site.asgi:application"]
    with (tmp_path / "daphne.log").open("w") as output:
        server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=output, stderr=output)
    try:
        wait_for_health(port, server)
        for uri in [
            "/setup/?token=first-run-s3cret&next=/chats/",
            "/accounts/oidc/callback/?code=oauth-c0de&state=oauth-st4te",
            "/v1/models?key=api-k3y",
        ]:
            # Answered 403 or 404 (an HTTPError): logged all the same.
            with contextlib.suppress(urllib.error.HTTPError):
                urllib.request.urlopen(f"http://127.0.0.1:{port}{uri}", timeout=30).close()
    finally:
        stop_process(server)
    logged = access_log.read_text()
    assert "GET /setup/?token=REDACTED&next=%2Fchats%2F" in logged, logged
    for secret in ["first-run-s3cret", "oauth-c0de", "oauth-st4te", "api-k3y"]:
        assert secret not in logged, logged


@pytest.mark.slow
def test_serve_names_the_token_file_when_its_output_is_not_a_terminal(tmp_path):
    env = app_env(tmp_path, NEOTASK_LLM_BASE_URL="http://127.0.0.1:9/v1")
    manage(env, "migrate", "-v0")
    port = free_port()
    server = spawn_serve(env, port, output=True)  # a pipe, as a service's journal reads it
    try:
        line = server.stdout.readline()
        token = (tmp_path / "setup_token").read_text()
        assert token not in line
        assert line.strip() == (
            f"First run: create the admin account at http://127.0.0.1:{port}/setup/ (from "
            f"this machine), or from another with ?token= and the token in "
            f"{tmp_path / 'setup_token'}"
        )
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
