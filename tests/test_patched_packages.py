"""Modules that patch another package's internals name the versions they were
written against; a different version installed is a reminder to re-check them."""

from __future__ import annotations

import inspect
import tomllib
from importlib import metadata

import pytest

from agent import transport
from core import channel_layer
from core.postgresql import base as postgresql_base
from monitoring import logs
from neotask_site import request_bodies
from tests.support.processes import ROOT

PYPROJECT = ROOT / "pyproject.toml"
PATCHES = [channel_layer, logs, postgresql_base, request_bodies, transport]


@pytest.mark.parametrize("module", PATCHES, ids=lambda module: module.__name__)
def test_the_installed_versions_are_those_the_patch_was_written_for(module):
    for package, version in module.PATCHED_FOR.items():
        assert metadata.version(package) == version, (
            f"{package} {metadata.version(package)} is installed; {module.__file__} "
            f"was written against {version}: re-read it against the new version"
        )


@pytest.mark.parametrize("module", PATCHES, ids=lambda module: module.__name__)
def test_pyproject_pins_them_exactly(module):
    dependencies = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    for package, version in module.PATCHED_FOR.items():
        assert f"{package}=={version}" in dependencies, package


def test_the_postgresql_backend_overrides_what_django_still_has():
    """core/postgresql/base.py overrides a private method and reads a private flag:
    both must still be Django's, with the same shape."""
    from django.db.backends.base.base import BaseDatabaseWrapper

    overridden = BaseDatabaseWrapper.close_if_health_check_failed
    assert list(inspect.signature(overridden).parameters) == ["self"]
    assert "self.health_check_done = True" in inspect.getsource(overridden)
    assert "self.health_check_done = False" in inspect.getsource(BaseDatabaseWrapper.__init__)
    own = postgresql_base.DatabaseWrapper.close_if_health_check_failed
    assert list(inspect.signature(own).parameters) == ["self"]
