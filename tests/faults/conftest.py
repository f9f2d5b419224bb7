"""What the fault tests share: a PostgreSQL server of their own, to stop and start."""

from __future__ import annotations

import os
import pwd
from collections.abc import Iterator

import pytest

from tests.support.processes import PrivatePostgres, postgres_bin_dir


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        pytest.skip("the PostgreSQL server programs (initdb, pg_ctl) are not installed")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("initdb refuses root, and there is no postgres user to run it as")
    server = PrivatePostgres(bin_dir)
    try:
        server.start()
        yield server
    finally:
        server.close()
