"""System checks of the memory app: what the team profile needs of PostgreSQL."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error
from django.db import DatabaseError, connections

from memory.pgvector import schema


def pgvector_installed(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """memory.E001: PostgreSQL without the pgvector extension (the team profile keeps
    its memory vectors in it). A server that cannot be reached is not this check's
    to report."""
    connection = connections["default"]
    if connection.vendor != "postgresql":
        return []
    try:
        problem = schema.missing_extension(connection)
    except DatabaseError:
        return []
    if problem is None:
        return []
    hint = f"apt-get install {schema.package_name(connection)} (docs/deploy.md)"
    return [Error(problem, hint=hint, id="memory.E001")]
