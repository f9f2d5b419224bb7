"""Deployment profiles: what the environment variables turn into.

The embedded profile (no DATABASE_URL, no REDIS_URL) needs no service: SQLite
in the data dir, an in-memory channel layer, django-q2 on the ORM broker. The
team profile switches each part to PostgreSQL / Redis by configuration alone.
Each builder raises ConfigError naming the variable at fault.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import dj_database_url

from core.config import FALSE_WORDS, TRUE_WORDS, ConfigError

# At most one writer at a time is SQLite's rule; these make writers queue
# instead of failing: WAL lets readers run beside the writer, IMMEDIATE takes
# the write lock when a transaction starts (so it never has to be upgraded
# mid-way, which is what raises "database is locked" despite a busy timeout),
# and the timeout lets a writer wait up to 20 s for its turn.
SQLITE_OPTIONS = {
    "timeout": 20,
    "transaction_mode": "IMMEDIATE",
    # secure_delete: a deleted row's bytes are zeroed, not left in its page or in
    # the free list (memory.forgetting: forgotten means gone from the file too).
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA secure_delete=ON",
}

# Seconds a connection is kept. Channels runs every consumer's ORM call in one
# shared thread and closes obsolete connections around each: with 0, SQLite
# reopened its file (0.5 ms: WAL's shared memory, the PRAGMAs, Django's SQL
# functions) about 20 times per chat turn.
CONN_MAX_AGE = 60


def env_bool(environ: dict[str, str] | os._Environ[str], name: str, default: bool) -> bool:
    raw = environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    if raw.strip().lower() in TRUE_WORDS:
        return True
    if raw.strip().lower() in FALSE_WORDS:
        return False
    raise ConfigError(f"{name} must be true or false, not {raw!r}")


def env_list(environ: dict[str, str] | os._Environ[str], name: str, default: str) -> list[str]:
    return [item.strip() for item in environ.get(name, default).split(",") if item.strip()]


def default_data_dir(base_dir: Path) -> Path:
    """`var/` in a checkout (beside manage.py); where an installed wheel runs, the
    user's data folder (XDG), never a folder inside site-packages."""
    if (base_dir / "manage.py").exists():
        return base_dir / "var"
    xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(xdg) / "neotask"


def data_dir(raw: str | None, base_dir: Path) -> Path:
    path = Path(raw).expanduser() if raw else default_data_dir(base_dir)
    if not path.is_absolute():
        path = base_dir / path
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"NEOTASK_DATA_DIR: cannot create {path} ({exc.strerror})") from None
    if not os.access(path, os.W_OK):
        raise ConfigError(f"NEOTASK_DATA_DIR: {path} is not writable")
    # A data dir an older version (or a loose umask) left open is made private;
    # only one that is surely Neotask's, never a directory merely pointed at.
    if (path / "secret_key").exists():
        with contextlib.suppress(PermissionError):
            path.chmod(0o700)
    return path


def secret_key(given: str | None, directory: Path) -> str:
    """The given key, or one generated once and kept in the data dir."""
    if given:
        return given
    path = directory / "secret_key"
    if not path.exists():
        # Write to a temporary file, then link it into place: linking fails if
        # another process won the race, so every process reads the same key.
        fd, temp = tempfile.mkstemp(dir=directory, prefix=".secret_key.")
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_urlsafe(50))
            os.chmod(temp, 0o600)
            with contextlib.suppress(FileExistsError):
                os.link(temp, path)
        finally:
            os.unlink(temp)
    key = path.read_text().strip()
    if len(key) < 32:
        raise ConfigError(
            f"{path}: the stored secret key is too short; delete the file to renew it"
        )
    return key


def databases(url: str | None, directory: Path) -> dict[str, dict[str, Any]]:
    if not url:
        return {
            "default": {
                "ENGINE": "django.db.backends.sqlite3",
                "NAME": directory / "neotask.sqlite3",
                "OPTIONS": dict(SQLITE_OPTIONS),
                "CONN_MAX_AGE": CONN_MAX_AGE,
                "TEST": {"NAME": str(directory / "test.sqlite3")},
            }
        }
    if not url.startswith(("postgres://", "postgresql://")):
        raise ConfigError("DATABASE_URL must start with postgres:// or postgresql://")
    try:
        config = dj_database_url.parse(
            url,
            engine="core.postgresql",  # Django's, its health check made when needed
            conn_max_age=CONN_MAX_AGE,
            conn_health_checks=True,
        )
    except ValueError as exc:
        raise ConfigError(f"DATABASE_URL is not a valid database URL ({exc})") from None
    if not config.get("NAME"):
        raise ConfigError("DATABASE_URL must name a database, e.g. postgresql://user@host/neotask")
    return {"default": dict(config)}


def check_redis_url(url: str) -> str:
    parsed = urlparse(url)
    if parsed.scheme not in ("redis", "rediss", "unix") or not (parsed.hostname or parsed.path):
        raise ConfigError("REDIS_URL must look like redis://host:6379/0")
    return url


# django-q2 keeps each cluster's status in the broker when it is Redis, else in
# this cache (its ORM broker's stats need a cache every process shares).
JOBS_CACHE = "jobs"


# Frames waiting for a worker to send them. channels_redis queues the frames of
# all the chats one process serves in a single Redis list, and both layers drop
# what exceeds the capacity without a word: channels' default of 100 lost
# streamed deltas at 100 chats on 2 workers (bench/load_chat.py). Still bounded:
# unread frames expire after 60 s.
CHANNEL_CAPACITY = 10_000


def caches(redis_url: str | None, prefix: str, directory: Path) -> dict[str, Any]:
    """Redis when there is one, so that every web process shares the login
    throttle's counts; else the one web process's memory, and for the job
    cluster's status (read by /healthz in the web server) files in the data dir."""
    if not redis_url:
        return {
            "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
            JOBS_CACHE: {
                "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
                "LOCATION": directory / "cache" / "jobs",
                "KEY_PREFIX": prefix,
            },
        }
    return {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": check_redis_url(redis_url),
            "KEY_PREFIX": prefix,
        }
    }


def channel_layers(redis_url: str | None) -> dict[str, Any]:
    if not redis_url:
        return {
            "default": {
                "BACKEND": "core.channel_layer.InMemoryChannelLayer",
                "CONFIG": {"capacity": CHANNEL_CAPACITY},
            }
        }
    return {
        "default": {
            "BACKEND": "core.channel_layer.RedisChannelLayer",
            "CONFIG": {"hosts": [check_redis_url(redis_url)], "capacity": CHANNEL_CAPACITY},
        }
    }


def q_cluster(redis_url: str | None, workers: int, name: str = "neotask") -> dict[str, Any]:
    cluster: dict[str, Any] = {
        "name": name,
        "workers": workers,
        "timeout": 300,
        "retry": 360,
        "max_attempts": 3,
        "catch_up": False,  # a missed schedule runs once, not once per missed slot
        "label": "Background jobs",
    }
    if redis_url:
        cluster["redis"] = check_redis_url(redis_url)
    else:
        cluster["orm"] = "default"
        cluster["poll"] = 0.5
        cluster["cache"] = JOBS_CACHE
    return cluster
