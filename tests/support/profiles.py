"""Which profile a test runs on: the in-process vector index is the SQLite profile's."""

from __future__ import annotations

import pytest
from django.db import connection

in_process_vectors = pytest.mark.skipif(
    connection.vendor != "sqlite",
    reason="vector backends in process (numpy, LanceDB): on PostgreSQL vectors live in pgvector",
)
