"""What other local users and the network can reach of a running Neotask:
file modes, the embedded model's port, login guessing, the first-run page."""

from __future__ import annotations

import os
import pty
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client

from core import profiles, throttle
from neotask_site import first_run
from tests.programs import accounts
from tests.support.processes import (
    ROOT,
    app_env,
    free_port,
    program_command,
    spawn_serve,
    wait_for_health,
)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_it_creates_the_data_dir_private(tmp_path):
    assert mode(profiles.data_dir(str(tmp_path / "new" / "data"), tmp_path)) == 0o700


def test_it_makes_an_open_neotask_data_dir_private_but_no_other_directory(tmp_path):
    ours, shared = tmp_path / "ours", tmp_path / "shared"
    for directory in (ours, shared):
        directory.mkdir(mode=0o755)
        directory.chmod(0o755)
    (ours / "secret_key").write_text("x" * 50)
    profiles.data_dir(str(ours), tmp_path)
    profiles.data_dir(str(shared), tmp_path)
    assert (mode(ours), mode(shared)) == (0o700, 0o755)


@pytest.mark.slow
def test_it_writes_private_files_whatever_the_umask(tmp_path):
    env = app_env(tmp_path / "data")
    migrate = [sys.executable, "manage.py", "migrate", "--noinput", "-v0"]
    for command in (migrate, program_command(accounts.memory_file)):
        subprocess.run(
            command,
            cwd=ROOT,
            env=env,
            check=True,
            preexec_fn=lambda: os.umask(0o022),  # a typical shell's: world-readable
        )
    data = tmp_path / "data"
    assert mode(data) == 0o700
    assert mode(data / "secret_key") == 0o600
    workspace = next((data / "workspaces").iterdir()) / "main"
    assert (mode(workspace), mode(workspace / "MEMORY.md")) == (0o700, 0o600)
    if not env.get("DATABASE_URL"):
        assert mode(data / "neotask.sqlite3") == 0o600


@pytest.mark.slow
def test_it_lets_the_embedded_model_bind_its_own_port(tmp_path):
    """No port is probed and released for another local user to take first:
    llama.cpp binds port 0 and serve hands its address to the web server."""
    env = app_env(tmp_path)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    port = free_port()
    server = spawn_serve(env, port)
    address_file = tmp_path / "local_llm.address"
    try:
        wait_for_health(port, server)
        address, _, model = address_file.read_text().partition("\n")  # and the model it serves
        assert address.startswith("http://127.0.0.1:") and model
        assert mode(address_file) == 0o600
        children = subprocess.run(
            ["ps", "-o", "args=", "--ppid", str(server.pid)], capture_output=True, text=True
        ).stdout
        [local_llm] = [line for line in children.splitlines() if "local_llm" in line]
        assert "--port" not in local_llm
        with socket.create_connection(("127.0.0.1", int(address.rsplit(":", 1)[1])), 5):
            pass  # the model serves where it said
        server.send_signal(signal.SIGINT)
        assert server.wait(timeout=30) == 0
        assert not address_file.exists()  # a stopped model's port is nobody's to trust
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            time.sleep(0.1)


# Login throttling ----------------------------------------------------------------


def attempt(client: Client, username: str, password: str) -> str:
    return client.post(
        "/accounts/login/", {"username": username, "password": password}
    ).content.decode()


def test_it_throttles_guessing_one_accounts_password(alice):
    guesser = Client(REMOTE_ADDR="198.51.100.7")
    for _ in range(throttle.PER_ACCOUNT_AND_ADDRESS):
        assert "enter a correct username and password" in attempt(guesser, "alice", "guess")
    # Now even the right password is refused from that address, and says why.
    assert "Too many failed logins" in attempt(guesser, "alice", "alice-password")
    assert "_auth_user_id" not in guesser.session
    # The admin's login is guarded by the same counts.
    admin_login = guesser.post("/admin/login/", {"username": "alice", "password": "alice-password"})
    assert "_auth_user_id" not in guesser.session and admin_login.status_code == 200
    # Spread over addresses, the account's own limit refuses it from anywhere
    # (tests/security/test_login_lockout.py: one address cannot lock it for others).
    for number in range(throttle.PER_ACCOUNT // throttle.PER_ACCOUNT_AND_ADDRESS - 1):
        spread = Client(REMOTE_ADDR=f"203.0.113.{number}")
        for _ in range(throttle.PER_ACCOUNT_AND_ADDRESS):
            attempt(spread, "alice", "guess")
    elsewhere = Client(REMOTE_ADDR="198.51.100.8")
    assert "Too many failed logins" in attempt(elsewhere, "alice", "alice-password")
    assert "_auth_user_id" not in elsewhere.session


def test_it_throttles_one_address_trying_many_accounts(bob):
    sprayer = Client(REMOTE_ADDR="198.51.100.9")
    for number in range(throttle.PER_ADDRESS):
        attempt(sprayer, f"user{number}", "password1")
    assert "Too many failed logins" in attempt(sprayer, "bob", "bob-password")
    # bob, from his own address, is not locked out by someone else's spraying.
    own = Client(REMOTE_ADDR="198.51.100.10")
    own.post("/accounts/login/", {"username": "bob", "password": "bob-password"})
    assert own.session["_auth_user_id"] == str(bob.pk)


# The first-run page --------------------------------------------------------------


def test_it_answers_setup_only_from_loopback_or_with_the_token(db, settings):
    remote = Client(REMOTE_ADDR="203.0.113.5")
    response = remote.get("/setup/")
    assert response.status_code == 403 and b"Create the admin account" not in response.content
    account = {"username": "intruder", "password1": "p4ss-phrase!", "password2": "p4ss-phrase!"}
    assert remote.post("/setup/", account).status_code == 403
    assert remote.post("/setup/?token=guess", account).status_code == 403
    assert not User.objects.exists()

    token = first_run.issue_token()
    assert mode(first_run.token_file()) == 0o600
    page = remote.get(f"/setup/?token={token}").content.decode()
    assert "Create the admin account" in page and f'value="{token}"' in page
    owner = {**account, "username": "owner", "token": token}
    assert remote.post("/setup/", owner)["Location"] == "/setup/model/"
    assert User.objects.get().username == "owner"
    assert not first_run.token_file().exists()  # used once


def test_it_trusts_no_address_behind_a_proxy(db, settings):
    settings.HTTPS = True
    assert Client().get("/setup/", secure=True).status_code == 403


@pytest.mark.slow
def test_it_prints_the_setup_link_to_a_terminal_when_serving_a_fresh_instance(tmp_path):
    """The link with its token, to a terminal only (tests/security/test_secrets_in_logs.py:
    to a pipe it names the token's file)."""
    env = app_env(tmp_path, NEOTASK_LLM_BASE_URL="http://127.0.0.1:9/v1")
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    port = free_port()
    controller, terminal = pty.openpty()
    server = spawn_serve(env, port, log=terminal, stderr=subprocess.DEVNULL)
    os.close(terminal)
    try:
        with open(controller, encoding="utf-8", closefd=True) as output:
            line = output.readline()
        token = (tmp_path / "setup_token").read_text()
        assert line.strip() == (
            f"First run: create the admin account at http://127.0.0.1:{port}/setup/?token={token}"
        )
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
