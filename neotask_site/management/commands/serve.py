"""`python manage.py serve`: everything Neotask needs, in one foreground process group.

Starts the daphne ASGI server and a django-q2 cluster as child processes and
watches them: Ctrl-C (or SIGTERM) stops all of them, and if one dies the
others are stopped too, so nothing is left half-running.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agent.llm import LOCAL_KEY_VARIABLE, LOCAL_URL_VARIABLE
from core.config import env_name
from core.ports import port_is_free
from neotask_site import first_run
from scheduler.config_sync import SyncError, sync_config_tasks

STOP_GRACE_SECONDS = 10.0
MODEL_START_SECONDS = 60
#: The job cluster's niceness: its embeddings and imports yield a shared core
#: to the chat's web server and embedded model (bench/local_model.py measures).
JOB_CLUSTER_NICE = 10


def at_nice(command: list[str], nice: int) -> list[str]:
    """`command` run at niceness `nice` (and its children, which inherit it)."""
    return ["nice", "-n", str(nice), *command] if nice else command


def web_server_command(host: str, port: int, *, verbose: bool) -> list[str]:
    """daphne (on uvloop), with its access log only when `verbose` and the logs
    are plain: JSON logs have Neotask's own line per request (monitoring.logs)."""
    json_logs = settings.NEOTASK["server"]["log_format"] == "json"
    access_log = verbose and not json_logs
    return [
        sys.executable,
        "-m",
        "neotask_site.web_server",
        "-b",
        host,
        "-p",
        str(port),
        *([] if access_log else ["--access-log", os.devnull]),
        "neotask_site.asgi:application",
    ]


class Command(BaseCommand):
    help = "Run Neotask: the web server and the background job cluster, until Ctrl-C."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=os.environ.get("NEOTASK_HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("NEOTASK_PORT", "8000")))
        parser.add_argument(
            "--no-jobs", action="store_true", help="Do not start the background job cluster."
        )
        parser.add_argument(
            "--verbose",
            action="store_true",
            help="Log every request and the INFO lines of every part ([server] verbose).",
        )

    def handle(
        self, *args: Any, host: str, port: int, no_jobs: bool, verbose: bool, **options: Any
    ) -> None:
        if not port_is_free(host, port):
            raise CommandError(
                f"Port {port} on {host} is already in use. Stop the other server, or choose "
                f"another port: make run PORT={port + 1}"
            )
        try:
            synced = sync_config_tasks()
        except SyncError as exc:
            raise CommandError(f"configuration error: {exc}") from None
        if synced.created or synced.updated or synced.deleted:
            self.stdout.write(str(synced))
        if not get_user_model().objects.exists():
            # From another machine the first-run page needs the token.
            self.stdout.write(first_run.setup_link(f"http://{host}:{port}", self.stdout.isatty()))
        # manage.py's commands, also where a wheel is installed and there is no manage.py.
        manage = ["-m", "neotask_site"]
        env = dict(os.environ)
        verbose = verbose or settings.NEOTASK["server"]["verbose"]
        if verbose:  # the children's logging (monitoring.logs.logging_config) too
            env[env_name("server", "verbose")] = "true"
        commands: dict[str, list[str]] = {}
        # Parts that may fail without taking the rest down: without the
        # embedded model the chat says what to configure; everything else works.
        optional = set()
        address_file = Path(settings.DATA_DIR) / "local_llm.address"
        if not settings.NEOTASK["llm"]["base_url"]:
            address_file.unlink(missing_ok=True)  # a previous run's port is not ours
            env[LOCAL_KEY_VARIABLE] = secrets.token_urlsafe(32)
            local_llm = [sys.executable, *manage, "local_llm", "--address-file", str(address_file)]
            commands["embedded model"] = local_llm
            optional.add("embedded model")
        commands["web server"] = web_server_command(host, port, verbose=verbose)
        if not no_jobs:
            commands["job cluster"] = at_nice(
                [sys.executable, *manage, "qcluster"], JOB_CLUSTER_NICE
            )

        children: dict[str, subprocess.Popen] = {}
        stopping = False

        def request_stop(signum: int, frame: Any) -> None:
            nonlocal stopping
            stopping = True

        previous = {
            sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            for name, command in commands.items():
                children[name] = subprocess.Popen(command, cwd=settings.BASE_DIR, env=env)
                if name == "embedded model":
                    # Ready before the web server starts, so the first message
                    # does not race the model's loading; the model's server
                    # bound its own port, and says which.
                    address = self.wait_for_address(address_file, children[name])
                    if address:
                        env[LOCAL_URL_VARIABLE] = f"{address}/v1"
            self.stdout.write(
                self.style.SUCCESS(f"Neotask is running at http://{host}:{port}/")
                + "  (Ctrl-C to stop)"
            )
            exit_code = 0
            while not stopping:
                for name, child in list(children.items()):
                    if child.poll() is None:
                        continue
                    self.stderr.write(f"The {name} stopped (exit code {child.returncode}).")
                    if name in optional:
                        del children[name]
                        continue
                    exit_code = child.returncode or 1
                    stopping = True
                    break
                time.sleep(0.2)
        finally:
            self.stop(children)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if exit_code:
            raise CommandError("Neotask stopped because a part of it failed.", returncode=exit_code)
        self.stdout.write("Neotask stopped.")

    def wait_for_address(self, address_file: Path, child: subprocess.Popen) -> str:
        """The embedded model's address once it serves; "" if it failed to start."""
        warn_at = time.monotonic() + MODEL_START_SECONDS
        while child.poll() is None:
            with contextlib.suppress(FileNotFoundError):
                # "<address>\n<model>" (agent.local_model.served)
                return address_file.read_text().strip().partition("\n")[0]
            if warn_at and time.monotonic() > warn_at:
                self.stderr.write(
                    f"The embedded model is still loading after {MODEL_START_SECONDS} s."
                )
                warn_at = 0
            time.sleep(0.1)
        return ""

    def stop(self, children: dict[str, subprocess.Popen]) -> None:
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for name, child in children.items():
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.stderr.write(f"The {name} did not stop in time; killing it.")
                child.kill()
                child.wait()
