"""The container image's entrypoint (deploy/image/build.py, docs/deploy.md):

    python -m neotask_site.container web [SERVE OPTIONS]   # the default
    python -m neotask_site.container worker
    python -m neotask_site.container healthcheck
    python -m neotask_site.container COMMAND [ARGS]         # any manage.py command

`web` migrates, fetches and prepares the embedded model when no model server is
configured (as `make run` does; offline, the bundled model answers), then becomes
`serve` (`--no-jobs` for a web replica beside a worker). `worker` migrates, then
becomes the job cluster alone. A new image on an old volume therefore upgrades it
at start. Replicas starting together migrate one at a time: on PostgreSQL each
waits for an advisory lock (SQLite serves one container).
"""

from __future__ import annotations

import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence

#: pg_advisory_lock's key for migrations: any number no other code uses.
MIGRATION_LOCK = 0x4E454F5441534B  # "NEOTASK"
HEALTH_TIMEOUT_SECONDS = 4
DATABASE_WAIT_SECONDS = 60


def wait_for_database(seconds: float = DATABASE_WAIT_SECONDS) -> None:
    """A replica started beside its database (compose, a pod) may come up first:
    wait for it rather than exit and be restarted in a loop (podman-compose 1.0.3
    keeps only the order of depends_on, not its conditions)."""
    from django.db import OperationalError, connection

    deadline = time.monotonic() + seconds
    while True:
        try:
            connection.ensure_connection()
            return
        except OperationalError as exc:
            if time.monotonic() > deadline:
                raise
            print(f"waiting for the database: {exc}".strip(), file=sys.stderr, flush=True)
            connection.close()
            time.sleep(1)


def migrate() -> None:
    from django.core.management import call_command
    from django.db import connection

    wait_for_database()
    locked = connection.vendor == "postgresql"
    if locked:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s)", [MIGRATION_LOCK])
    try:
        call_command("migrate", interactive=False, verbosity=1)
    finally:
        if locked:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [MIGRATION_LOCK])


def prepare_embedded_model() -> None:
    """`make run`'s two optional steps: neither failing stops the start."""
    from django.conf import settings
    from django.core.management import call_command

    if settings.NEOTASK["llm"]["base_url"]:
        return  # a model server answers: nothing embedded to fetch
    for command, *arguments in (["fetch_model"], ["local_llm", "--prepare"]):
        try:
            call_command(command, *arguments)
        except (Exception, SystemExit) as exc:  # a command's error, or the network's
            print(f"{command}: {exc or 'failed'}; going on", file=sys.stderr, flush=True)


def become(*arguments: str) -> None:
    """Replace this process by `python -m neotask_site ARGUMENTS` (tini's child)."""
    from django.db import connections

    connections.close_all()
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, "-m", "neotask_site", *arguments])


def healthcheck() -> int:
    """0 when /healthz answers 200 on this container's port."""
    port = os.environ.get("NEOTASK_PORT", "8000")
    request = urllib.request.Request(f"http://127.0.0.1:{port}/healthz")
    request.add_header("Host", "localhost")  # in every ALLOWED_HOSTS this image documents
    try:
        with urllib.request.urlopen(request, timeout=HEALTH_TIMEOUT_SECONDS) as response:
            return 0 if response.status == 200 else 1
    except (urllib.error.URLError, OSError) as exc:
        print(f"/healthz: {exc}", file=sys.stderr)
        return 1


def main(argv: Sequence[str]) -> int:
    mode, *rest = argv or ["web"]
    if mode == "healthcheck":
        return healthcheck()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "neotask_site.settings")
    if mode not in ("web", "worker"):
        become(mode, *rest)  # backup, createsuperuser, shell…
    import django

    django.setup()
    migrate()
    if mode == "worker":
        become("qcluster", *rest)
    prepare_embedded_model()
    become("serve", *rest)
    return 0  # not reached: become() does not return


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
