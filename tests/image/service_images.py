"""PostgreSQL with pgvector and Redis as local images, for the team compose test.

No image registry is reachable here, so these stand in for the upstream images
deploy/compose.team.yaml names by default (pgvector/pgvector, redis): Debian's
packages, installed by mmdebstrap, imported by `podman import`. They read the
upstream images' variables (POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB,
PGDATA), so the compose file needs nothing for them. Each root filesystem is
built once per recipe (a few minutes) and kept in build/image/.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.image.conftest import REPO, podman

WORK = REPO / "build" / "image"
EXCLUDED = ["/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*"]

#: initdb on an empty data folder (the upstream image's variables), then postgres
#: as PID 1: it answers SIGTERM with a fast-enough shutdown of its own.
POSTGRES_ENTRYPOINT = r"""#!/bin/sh
set -eu
BIN=/usr/lib/postgresql/17/bin
PGDATA="${PGDATA:-/var/lib/postgresql/data}"
user="${POSTGRES_USER:-postgres}"
database="${POSTGRES_DB:-$user}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    : "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD: the password of $user}"
    mkdir -p "$PGDATA"
    secret=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" > "$secret"
    "$BIN/initdb" -D "$PGDATA" -U "$user" --pwfile="$secret" -E UTF8 \
        --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    rm -f "$secret"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    printf "listen_addresses = '*'\nunix_socket_directories = '/tmp'\n" \
        >> "$PGDATA/postgresql.conf"
    if [ "$database" != postgres ]; then
        "$BIN/postgres" --single -D "$PGDATA" postgres >/dev/null <<EOF
CREATE DATABASE "$database" OWNER "$user";
EOF
    fi
    echo "initialised $PGDATA: database $database, superuser $user"
fi
exec "$BIN/postgres" -D "$PGDATA" "$@"
"""

#: (suite, packages, files written into the root, podman import's --change lines)
RECIPES = {
    "localhost/neotask-test-postgres:17": (
        "trixie",
        ["postgresql-17", "postgresql-17-pgvector"],
        {"usr/local/bin/neotask-postgres": POSTGRES_ENTRYPOINT},
        [
            "ENV PGDATA=/var/lib/postgresql/data",
            "USER postgres",
            'ENTRYPOINT ["/usr/local/bin/neotask-postgres"]',
            "EXPOSE 5432",
            "STOPSIGNAL SIGINT",
        ],
    ),
    "localhost/neotask-test-redis:7": (
        "bookworm",
        ["redis-server"],
        {},
        [
            "USER redis",
            "WORKDIR /var/lib/redis",
            'CMD ["redis-server", "--protected-mode", "no", "--bind", "0.0.0.0"]',
            "EXPOSE 6379",
        ],
    ),
}


def root_filesystem(suite: str, packages: list[str], files: dict[str, str]) -> Path:
    """mmdebstrap's tar of SUITE with PACKAGES and FILES, built once per recipe."""
    recipe = json.dumps([suite, packages, files, EXCLUDED])
    tar = WORK / f"service-{suite}-{hashlib.sha256(recipe.encode()).hexdigest()[:12]}.tar"
    if tar.exists():
        return tar
    WORK.mkdir(parents=True, exist_ok=True)
    partial = tar.with_suffix(".partial")
    with tempfile.TemporaryDirectory() as scratch:
        hooks = []
        for path, text in files.items():
            source = Path(scratch) / path.replace("/", "_")
            source.write_text(text)
            source.chmod(0o755)
            hooks.append(f"--customize-hook=upload {source} /{path}")
            hooks.append(f'--customize-hook=chmod 755 "$1/{path}"')
        # The data folder the image's user owns (a new named volume copies it).
        hooks.append(
            '--customize-hook=if [ -d "$1/var/lib/postgresql" ]; then'
            ' mkdir -p "$1/var/lib/postgresql/data";'
            ' chroot "$1" chown postgres:postgres /var/lib/postgresql/data;'
            ' chmod 700 "$1/var/lib/postgresql/data"; fi'
        )
        subprocess.run(
            [
                "mmdebstrap", "--variant=minbase", "--quiet", "--format=tar",
                "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
                f"--include={','.join(packages)}",
                *(f"--dpkgopt=path-exclude={path}" for path in EXCLUDED),
                *hooks,
                suite, str(partial),
            ],
            check=True,
            timeout=900,
        )  # fmt: skip
    partial.rename(tar)
    return tar


def service_image(tag: str) -> str:
    """TAG in podman's store, imported from its root filesystem unless already there
    with the same recipe (the label says which)."""
    suite, packages, files, changes = RECIPES[tag]
    key = hashlib.sha256(json.dumps(RECIPES[tag]).encode()).hexdigest()[:12]
    have = podman("image", "inspect", "--format", "{{.Labels}}", tag, check=False)
    if key in have:
        return tag
    assert shutil.which("mmdebstrap"), "mmdebstrap is missing (apt-get install mmdebstrap)"
    tar = root_filesystem(suite, packages, files)
    arguments = []
    for change in [*changes, f"LABEL neotask.recipe={key}"]:
        arguments += ["--change", change]
    podman("import", "--quiet", *arguments, str(tar), tag, timeout=600)
    return tag


def service_images() -> dict[str, str]:
    """The team's database and Redis images, as the compose file's variables."""
    return {
        "NEOTASK_POSTGRES_IMAGE": service_image("localhost/neotask-test-postgres:17"),
        "NEOTASK_REDIS_IMAGE": service_image("localhost/neotask-test-redis:7"),
    }
