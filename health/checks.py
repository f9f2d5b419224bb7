"""The checks behind /healthz: does each part Neotask needs answer?

Anyone may ask (a load balancer has no login), so the answer holds check names
and "ok" / "down" only; why a part is down goes to the log, once when it goes
down (probes come every few seconds from every load balancer). Every check is
cheap: a `SELECT 1`, a Redis PING, reading the job clusters' status, and a
model probe and a database write kept for a few seconds.

A database that answers but cannot write (a full disk, a read-only replica) is
down: every chat turn would fail. A write rolled back proves nothing (on SQLite
nothing reaches the disk), so the probe commits one, a counter of the probes
themselves; and on SQLite, whose WAL may still take a few commits on a full disk,
the free space of the database's disk is read too.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import redis
from django.conf import settings
from django.db import DatabaseError, OperationalError, connection, transaction
from django_q.brokers import Broker, get_broker
from django_q.conf import Conf
from django_q.status import Stat

from agent import providers
from agent.llm import Endpoint
from monitoring import counters

log = logging.getLogger(__name__)

OK, DOWN = "ok", "down"
UNKNOWN = "unknown"  # the model, while the database (which names it) is down
REDIS_SECONDS = 1.0
# GET <endpoint>/models: the server and the key, without a completion (which
# would spend tokens and a GPU slot on every probe). Kept MODEL_CACHE_SECONDS,
# so N workers probed every few seconds ask the model about once each per 10 s.
MODEL_PROBE_SECONDS = 2.0
MODEL_CACHE_SECONDS = 10.0
ALIVE = (Conf.IDLE, Conf.WORKING)
# The write probe: at most one per process this often, waiting this long for a lock
# (another writer holding it means that writes work), and the least free space a
# SQLite database's disk must have (a page and its WAL frame are 4 KiB each).
WRITE_CACHE_SECONDS = 5.0
WRITE_LOCK_MS = 500
MIN_FREE_BYTES = 1 << 20

# A check's state, and why (for the log).
Result = tuple[str, str]

_last_states: dict[str, str] = {}  # this process's, to log changes only


def run_checks() -> dict[str, str]:
    """Each part's state, by name: db, channels (with Redis), jobs, model."""
    checks: dict[str, Callable[[], Result]] = {"db": database}
    if redis_url := settings.REDIS_URL:
        checks["channels"] = functools.partial(channel_layer, redis_url)
    checks |= {"jobs": job_cluster, "model": model_endpoint}
    states = {}
    for name, check in checks.items():
        state, why = check()
        if state != _last_states.get(name, OK):
            if state == OK:
                log.info("health: %s is up again", name)
            else:
                log.warning("health: %s is %s: %s", name, state, why)
        _last_states[name] = states[name] = state
    return states


def database() -> Result:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError as exc:
        return DOWN, f"the database did not answer ({exc})"
    return writable()


# The last write probe: (when, result).
_last_write: tuple[float, Result] | None = None


def writable() -> Result:
    """The database takes a write (cached WRITE_CACHE_SECONDS)."""
    global _last_write
    now = time.monotonic()
    if _last_write is not None and now - _last_write[0] < WRITE_CACHE_SECONDS:
        return _last_write[1]
    result = write_probe()
    _last_write = (now, result)
    return result


def write_probe() -> Result:
    if connection.vendor == "sqlite":
        folder = Path(connection.settings_dict["NAME"]).parent
        free = shutil.disk_usage(folder).free
        if free < MIN_FREE_BYTES:
            return DOWN, f"the database's disk ({folder}) has {free:,} bytes free"
    try:
        with short_lock_wait(), transaction.atomic():
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute(f"SET LOCAL lock_timeout = {WRITE_LOCK_MS}")
            counters.upsert({(counters.HEALTH_WRITES, ""): 1})
    except OperationalError as exc:
        if "lock" in str(exc).lower():  # another writer has it: writes work
            return OK, ""
        return DOWN, f"the database cannot write ({exc})"
    except DatabaseError as exc:
        return DOWN, f"the database cannot write ({exc})"
    return OK, ""


@contextlib.contextmanager
def short_lock_wait() -> Iterator[None]:
    """On SQLite, whose busy timeout is long (writers queue on it), a short one
    while the probe waits for the write lock."""
    if connection.vendor != "sqlite":
        yield
        return
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA busy_timeout")
        (saved,) = cursor.fetchone()
        cursor.execute(f"PRAGMA busy_timeout = {WRITE_LOCK_MS}")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"PRAGMA busy_timeout = {int(saved)}")


def channel_layer(url: str) -> Result:
    """The Redis that carries the chats' frames between workers (and the job queue)."""
    client = redis.Redis.from_url(
        url, socket_connect_timeout=REDIS_SECONDS, socket_timeout=REDIS_SECONDS
    )
    try:
        client.ping()
    except redis.RedisError as exc:
        return DOWN, f"Redis did not answer ({exc})"
    finally:
        client.close()
    return OK, ""


@functools.cache
def jobs_broker() -> Broker:
    """One per process: django-q2's Redis broker opens a connection pool each."""
    return get_broker()


def job_cluster() -> Result:
    """At least one django-q2 cluster of this queue alive. Each saves its status
    every half second for 3 s (in Redis, or on the embedded profile in the file
    cache `jobs`), so a stopped or stuck cluster is gone from the list in 3 s."""
    try:
        stats = Stat.get_all(jobs_broker())
    except (redis.RedisError, OSError) as exc:
        return DOWN, f"the job clusters' status cannot be read ({exc})"
    if any(stat.status in ALIVE for stat in stats):
        return OK, ""
    return DOWN, f"no job cluster of queue {Conf.CLUSTER_NAME!r} is running"


# The last probe: (base URL, key, when, result).
_last_probe: tuple[str, str, float, Result] | None = None


def model_endpoint() -> Result:
    """The site's default model answers (cached MODEL_CACHE_SECONDS)."""
    global _last_probe
    try:
        endpoint = providers.default_endpoint()
    except DatabaseError:
        return UNKNOWN, "the database, which names the model, did not answer"
    if not endpoint.base_url:
        return DOWN, "the embedded model is not running, and no endpoint is set"
    now = time.monotonic()
    if _last_probe is not None:
        url, key, when, result = _last_probe
        if (url, key) == (endpoint.base_url, endpoint.api_key) and now - when < MODEL_CACHE_SECONDS:
            return result
    result = probe(endpoint)
    _last_probe = (endpoint.base_url, endpoint.api_key, now, result)
    return result


def probe(endpoint: Endpoint) -> Result:
    headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
    try:
        response = httpx.get(
            f"{endpoint.base_url}/models", headers=headers, timeout=MODEL_PROBE_SECONDS
        )
    except httpx.HTTPError as exc:
        return DOWN, f"the model at {endpoint.label} did not answer ({exc!r})"
    # A server without /models (404) is up; a refused key fails every chat too.
    if response.status_code >= 500 or response.status_code in (401, 403):
        return DOWN, f"the model at {endpoint.label} answered {response.status_code}"
    return OK, ""
