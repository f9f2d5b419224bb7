"""Background jobs of the app's cluster."""

from __future__ import annotations

from django_q.tasks import async_task


def fail_one() -> str:
    """A job that fails in the cluster (math domain error): its id."""
    return str(async_task("math.sqrt", -1))
