from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.security.world import isolated_process_state


@pytest.fixture
def fresh_state(tmp_path) -> Iterator[None]:
    """Own workspaces and in-process indexes for the test (tests.security.world)."""
    with isolated_process_state(tmp_path / "data"):
        yield
