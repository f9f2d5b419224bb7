"""The wheel: built from the tree and run apart from it, it has every package and
every file read at run time, so that `pip install .` (not -e) runs as a checkout does.

A package left out of pyproject.toml, or a template, static file or data file left
out of its package data, fails here by name instead of at the first start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

REPO = Path(__file__).resolve().parent.parent
# Packages of the tree that stay out of the wheel (pyproject.toml's find exclude).
NOT_SHIPPED = {"tests", "bench"}
# What the build reads besides the packages (pyproject.toml: readme, license-files).
BUILD_FILES = ["pyproject.toml", "README.md", "LICENSE", "NOTICE", "licenses"]

pytestmark = pytest.mark.slow  # starts pip and a Python with the wheel's Django

# Run with -I: neither the working directory nor PYTHONPATH is on sys.path, so the
# project's packages can come only from the installed wheel put first on it.
PROGRAM = r"""
import json, sys
installed, repo, packages = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
# The venv's editable install (make's `pip install -e .`) would find a package the
# wheel lacks in a checkout; without its finder that package fails to import.
sys.meta_path[:] = [
    f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")
]
sys.path[:] = [installed] + [p for p in sys.path if p and not p.startswith("__editable__")]
# The checkout is not on the path; its .venv may be (make's venv lives in it).
inside = [p for p in sys.path if (p == repo or p.startswith(repo + "/"))]
assert all(p.startswith(sys.prefix + "/") for p in inside), sys.path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.staticfiles import finders
from django.template.loader import get_template
from django.test import Client

from neotask_site.__main__ import main  # the console script `neotask`

sys.argv = ["neotask", "check", "--fail-level", "WARNING"]
main()  # django.setup(): imports every installed app and its models
sys.argv = ["neotask", "migrate", "--verbosity", "0"]
main()
for package in packages:  # and those that are no app
    __import__(package)
import neotask_site.asgi  # noqa: the consumers and routing, which no URL reaches

client = Client(HTTP_HOST="localhost")
first_run = client.get("/", follow=True)  # no account yet: the page to create one
get_user_model().objects.create_user("wheel")
client.force_login(get_user_model().objects.get(username="wheel"))
chat = client.get("/", follow=True)  # the chat: base.html, navigation, the includes
stylesheet = client.get("/static/neotask/neotask.css")  # WhiteNoise, as a browser gets it

from memory.embeddings import embed_text  # memory/minilm's tokenizer files

vector = embed_text("packaged")
files = {
    name: getattr(module, "__file__", None) or ""
    for name, module in sys.modules.items()
    if name.split(".")[0] in packages
}
print(json.dumps({
    "apps": list(settings.INSTALLED_APPS),
    "template": str(get_template("base.html").origin.name),
    "static": finders.find("neotask/neotask.css"),
    "first_run": [first_run.status_code, first_run.redirect_chain[-1][0]],
    "chat": [chat.status_code, chat.redirect_chain[-1][0] if chat.redirect_chain else "/"],
    "chat_has_stylesheet": b"neotask/neotask.css" in chat.content,
    "stylesheet": [stylesheet.status_code, stylesheet.getvalue().count(b"{")],
    "vector": len(vector),
    "files": files,
}))
"""


def source_packages() -> set[str]:
    """The tree's top-level packages, but the tests' and benchmarks'."""
    return {init.parent.name for init in REPO.glob("*/__init__.py")} - NOT_SHIPPED


def tree_files(*paths: str) -> list[str]:
    """The files under `paths` that a checkout has: tracked, or new and not ignored."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *paths],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return [name for name in listed if (REPO / name).is_file()]  # not those deleted


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """`pip install .`, not editable, of a copy of the tree (setuptools writes build/
    and egg-info beside the sources, and a stale build/ would hide a missing file),
    into a folder of its own: what the wheel pip built puts in site-packages."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    for name in tree_files(*BUILD_FILES, *source_packages(), *NOT_SHIPPED):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_bytes((REPO / name).read_bytes())
    # No build isolation: offline, with the venv's setuptools (the test extra).
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", str(source), "--no-deps",
         "--no-build-isolation", "--no-index", "--quiet", "--target", str(root / "installed")],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert install.returncode == 0, install.stdout + install.stderr
    return root / "installed"


def test_it_ships_every_package_of_the_tree_and_no_test(installed):
    shipped = {init.parent.name for init in installed.glob("*/__init__.py")}
    assert sorted(source_packages() - shipped) == [], "missing from the wheel"
    assert sorted(shipped & NOT_SHIPPED) == [], "in the wheel but only for development"
    ours = {app.split(".")[0] for app in settings.INSTALLED_APPS} & {
        path.name for path in REPO.iterdir()
    }
    assert sorted(ours - shipped) == [], "installed apps missing from the wheel"


def test_it_has_the_console_script(installed):
    [entry_points] = installed.glob("neotask-*.dist-info/entry_points.txt")
    assert "neotask = neotask_site.__main__:main" in entry_points.read_text().splitlines()


def test_it_ships_every_file_of_its_packages(installed):
    """Templates, static files, migrations, the tokenizer's files: each file of a
    package is in the wheel (pyproject.toml's package-data for those not .py)."""
    files = tree_files(*source_packages())
    assert len(files) > 100
    missing = [name for name in files if not (installed / name).is_file()]
    assert missing == [], "not in the wheel: pyproject.toml's package-data?"


def test_the_installed_wheel_starts_migrates_and_serves_pages(installed, tmp_path):
    env = {
        name: value
        for name, value in os.environ.items()
        # Its own SQLite database and local cache, whatever the suite's profile.
        if name not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"}
        and not name.startswith("NEOTASK_")
    }
    env |= {
        "DJANGO_SETTINGS_MODULE": "neotask_site.settings",
        "NEOTASK_DATA_DIR": str(tmp_path / "data"),
        "NEOTASK_CONFIG": "",  # no config.toml: the defaults
        "NEOTASK_LLM_LOCAL_MODEL": "smollm2",  # installed, as in tests/settings.py
    }
    packages = sorted(source_packages())
    run = subprocess.run(
        [sys.executable, "-I", "-c", PROGRAM, str(installed), str(REPO), json.dumps(packages)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    seen = json.loads(run.stdout.splitlines()[-1])
    assert seen["apps"] == settings.INSTALLED_APPS  # the wheel's settings, as the tree's
    assert seen["first_run"] == [200, "/setup/"]
    assert seen["chat"][0] == 200 and seen["chat_has_stylesheet"]
    assert seen["stylesheet"][0] == 200 and seen["stylesheet"][1] > 10
    assert seen["vector"] == 384
    inside = str(installed) + os.sep
    assert seen["template"].startswith(inside) and seen["static"].startswith(inside)
    # Every module of the project's packages came from the wheel, not the checkout.
    assert set(packages) <= {name.split(".")[0] for name in seen["files"]}
    assert {name: path for name, path in seen["files"].items() if not path.startswith(inside)} == {}
