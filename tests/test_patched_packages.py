"""Modules that patch another package's internals name the versions they were
written against; a different version installed is a reminder to re-check them."""

from __future__ import annotations

import tomllib
from importlib import metadata

import pytest

from agent import transport
from core import channel_layer
from monitoring import logs
from neotask_site import request_bodies
from tests.support.processes import ROOT

PYPROJECT = ROOT / "pyproject.toml"
PATCHES = [channel_layer, logs, request_bodies, transport]


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
