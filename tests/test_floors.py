"""docs/architecture.md#floors states the floors the import-linter contract keeps
(`make lint`): the same packages in the same order, and every package of the
project on one."""

from __future__ import annotations

import re
import tomllib

from tests.support.processes import ROOT


def contract_floors() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    [floors] = [c for c in config["contracts"] if c["id"] == "floors"]
    return [" | ".join(part.strip() for part in layer.split("|")) for layer in floors["layers"]]


def documented_floors() -> list[str]:
    section = (ROOT / "docs" / "architecture.md").read_text().split("## Floors", 1)[1]
    rows = re.findall(r"^\| \d+ \| (.+?) \| .+ \|$", section.split("\n## ", 1)[0], re.M)
    return [row.replace("`", "").replace("\\|", "|") for row in rows]


def test_the_docs_list_the_contract_s_floors():
    assert documented_floors() == contract_floors()


def test_every_package_is_on_a_floor():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    on_floors = {name for floor in contract_floors() for name in floor.split(" | ")}
    find = config["tool"]["setuptools"]["packages"]["find"]
    # The top-level packages setuptools finds (a folder with an __init__.py) less
    # the excluded.
    packaged = {init.parent.name for init in ROOT.glob("*/__init__.py")} - set(find["exclude"])
    assert on_floors == packaged == set(config["tool"]["importlinter"]["root_packages"])
