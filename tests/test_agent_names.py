"""One rule for agent names, at every place that takes one.

Names starting with '_' or '-' were once accepted by the memory pages and importers
(a workspace directory could be made for them) but by no session key or Agent row.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client

from importers.aidaemon import import_aidaemon
from importers.forms import ImportForm
from importers.openclaw import import_openclaw
from importers.report import ImportRefused
from memory.files.discovery import workspaces_with_files
from memory.workspace import (
    AGENT_NAME_RULE,
    DEFAULT_AGENT,
    AgentNameError,
    check_agent_name,
    workspace_dir,
)
from scheduler.config_sync import SyncError, sync_config_tasks
from scheduler.models import ScheduledTask
from sessions_app.keys import SessionKey, SessionKeyError
from sessions_app.models import Agent, ApiToken, Session
from tests.support.imports import build_db
from tests.support.records import config_task
from tests.support.web import client_for

# Valid for the memory files' old rule, not for the session keys' one.
LEADING_MARKS = ["_notes", "-notes"]


@pytest.mark.parametrize("name", [DEFAULT_AGENT, "research", "a.b_c-1", "7", "x" * 64])
def test_it_accepts_agent_names_of_letters_digits_dots_dashes_underscores(name):
    assert check_agent_name(name) == name


@pytest.mark.parametrize(
    "name",
    [*LEADING_MARKS, ".hidden", "..", "notes\n", "a:b", "a/b", "Ärztin", "x" * 65, "", None, 7],
)
def test_it_refuses_other_agent_names_and_says_the_rule(name):
    with pytest.raises(AgentNameError) as refused:
        check_agent_name(name)
    assert str(refused.value) == f"agent {name!r} must be {AGENT_NAME_RULE}"


@pytest.mark.parametrize("name", LEADING_MARKS)
def test_it_refuses_the_name_in_the_admin_form(db, name):
    root = User.objects.create_superuser("root", password="root-password")
    client = client_for(root)
    response = client.post(
        "/admin/sessions_app/agent/add/", {"owner": root.pk, "name": name, "system_prompt": ""}
    )
    assert response.status_code == 200
    assert "starting with a letter or digit" in response.content.decode()
    assert not Agent.objects.exists()


@pytest.mark.parametrize("name", LEADING_MARKS)
def test_it_refuses_the_name_in_the_import_form(db, name):
    form = ImportForm("aidaemon", data={"aidaemon-agent": name})
    assert not form.is_valid()
    assert form.errors["agent"] == [f"agent {name!r} must be {AGENT_NAME_RULE}"]


@pytest.mark.parametrize("name", LEADING_MARKS)
def test_it_refuses_the_name_in_both_importers(alice, tmp_path, name):
    for importer in (import_aidaemon, import_openclaw):
        with pytest.raises(ImportRefused, match="starting with a letter or digit"):
            importer(tmp_path / "missing", alice, name)
    assert not workspace_dir(alice.pk, name, create=False).exists()


def test_it_refuses_the_name_in_the_import_command(alice, tmp_path):
    database = build_db(tmp_path / "aidaemon.db")
    with pytest.raises(CommandError, match="starting with a letter or digit"):
        call_command("import_aidaemon", str(database), user="alice", agent="_notes")


@pytest.mark.parametrize("name", [*LEADING_MARKS, "main\n"])
def test_it_refuses_the_name_in_the_api(alice, name):
    api = Client(headers={"Authorization": f"Bearer {ApiToken.issue(alice, 'script')[1]}"})
    response = api.post("/api/v1/sessions/", {"agent": name}, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"] == f"agent {name!r} must be {AGENT_NAME_RULE}"
    assert not Session.objects.exists()


@pytest.mark.parametrize("name", LEADING_MARKS)
def test_it_refuses_the_name_in_config_tasks(alice, name):
    with pytest.raises(SyncError) as refused:
        sync_config_tasks([config_task(agent=name)])
    assert str(refused.value) == (
        f'[[scheduled_tasks]] #1 "Morning brief": agent {name!r} must be {AGENT_NAME_RULE}'
    )
    assert not ScheduledTask.objects.exists() and not Agent.objects.exists()


@pytest.mark.parametrize("name", [*LEADING_MARKS, "main\n"])
def test_it_refuses_the_name_in_the_memory_pages(alice_client, alice, name):
    assert alice_client.get("/memory/files/", {"agent": name}).status_code == 404
    assert not workspace_dir(alice.pk, name, create=False).exists()


@pytest.mark.parametrize("name", LEADING_MARKS)
def test_it_refuses_the_name_in_session_keys(alice_client, name):
    with pytest.raises(SessionKeyError) as refused:
        SessionKey.parse(f"agent:{name}:web:abc")
    assert str(refused.value) == f"agent {name!r} must be {AGENT_NAME_RULE}"
    assert alice_client.get(f"/chat/agent:{name}:web:abc/").status_code == 404


def test_it_indexes_no_workspace_folder_named_against_the_rule(alice):
    for name in [DEFAULT_AGENT, *LEADING_MARKS]:
        folder = Path(settings.DATA_DIR) / "workspaces" / str(alice.pk) / name
        folder.mkdir(parents=True)
        (folder / "MEMORY.md").write_text("notes")
    assert list(workspaces_with_files()) == [(alice.pk, DEFAULT_AGENT)]
