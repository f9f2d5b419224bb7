from __future__ import annotations

import pytest

from tests.support.world import World, build_alice, build_bob


@pytest.fixture
def world(alice, bob) -> World:
    """Alice's marked rows of everything, and some of bob's own."""
    built = build_alice(alice)
    build_bob(bob)
    return built


@pytest.fixture
def alices_world(alice) -> World:
    """Alice's marked rows of everything, and nothing of bob's."""
    return build_alice(alice)
