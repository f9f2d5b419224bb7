"""The history of changes: every change to facts, memory files, terminal rules and
tasks — by the user, the agent, an import, a task, the admin or Neotask itself —
kept per owner with old → new values, and never edited."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.urls import reverse

from agent.approvals import create_request, decide
from agent.models import TerminalAllowedPrefix
from agent.tools import ToolContext, get_tool
from core.history import Actor, record_change
from core.models import Change, ChangeIsPermanent
from importers.aidaemon import run as import_aidaemon_database
from importers.archive.importing import import_archive
from importers.archive.writing import export_user
from importers.report import ImportReport
from memory.files.paths import write_memory_file
from memory.models import Fact, MemoryFile
from memory.workspace import workspace_dir
from scheduler.config_sync import sync_config_tasks
from scheduler.due_tasks import pause_broken, run_due_tasks
from scheduler.models import ScheduledTask
from tests.support.archives import build_user_data
from tests.support.imports import build_db
from tests.support.records import FRIDAY, MONDAY_9, allow_terminal, config_task, make_task
from tests.support.scripted_llm import Reply, reply_with_tool
from tests.support.tools import use_tool
from tests.support.web import client_for


def changes(owner: User, kind: str | None = None) -> list[tuple[str, str, str, dict, dict]]:
    """The owner's changes, oldest first: (actor, subject, action, old, new)."""
    rows = Change.objects.owned_by(owner).order_by("at", "id")
    if kind is not None:
        rows = rows.filter(subject_kind=kind)
    return [(c.actor, c.subject_label, c.action, c.old_value, c.new_value) for c in rows]


def remember(owner: User, value: str, actor: Actor) -> Fact:
    fact, _ = Fact.objects.remember(
        owner,
        "pref",
        "drink",
        value,
        actor=actor,
        source=Fact.Source.AGENT,
        origin=Fact.Origin.TURN,
    )
    return fact


# The record itself ------------------------------------------------------------


def test_it_keeps_only_the_fields_that_changed(alice):
    agent = Actor.agent("main")
    fact = remember(alice, "tea", agent)
    remember(alice, "coffee", agent)
    remember(alice, "coffee", agent)  # said again: nothing changed, nothing recorded
    assert fact.pk == Fact.objects.get(owner=alice).pk
    assert changes(alice) == [
        (
            "Agent (main)",
            "pref/drink",
            "created",
            None,
            {"category": "pref", "key": "drink", "value": "tea", "source": "agent"},
        ),
        ("Agent (main)", "pref/drink", "changed", {"value": "tea"}, {"value": "coffee"}),
    ]


def test_it_erases_a_forgotten_facts_values_from_its_history(alice, bob):
    fact = remember(alice, "tea", Actor.agent("main"))
    remember(alice, "coffee", Actor.agent("main"))
    remember(bob, "tea", Actor.agent("main"))
    fact.forget(Actor.user(alice))
    gone = "(forgotten)"
    assert changes(alice) == [
        (
            "Agent (main)",
            gone,
            "created",
            None,
            {"category": gone, "key": gone, "value": gone, "source": gone},
        ),
        ("Agent (main)", gone, "changed", {"value": gone}, {"value": gone}),
        ("You (alice)", gone, "deleted", None, None),
    ]
    assert "drink" not in str(Change.objects.owned_by(alice).values_list("subject_label"))
    assert "tea" not in str(Change.objects.owned_by(alice).values_list("old_value", "new_value"))
    assert changes(bob)[0][4]["value"] == "tea"  # another's history untouched


def test_it_refuses_to_edit_or_delete_the_history(alice):
    change = record_change(
        alice, Actor.user(alice), Change.Subject.FACT, 1, "a/b", Change.Action.CREATED
    )
    assert change is not None
    change.subject_label = "forged"
    with pytest.raises(ChangeIsPermanent):
        change.save()
    with pytest.raises(ChangeIsPermanent):
        change.delete()
    with pytest.raises(ChangeIsPermanent):
        Change.objects.filter(pk=change.pk).update(subject_label="forged")
    with pytest.raises(ChangeIsPermanent):
        Change.objects.filter(pk=change.pk).delete()
    assert Change.objects.get(pk=change.pk).subject_label == "a/b"


def test_it_keeps_each_owners_history_apart(alice, bob):
    remember(alice, "tea", Actor.user(alice))
    remember(bob, "milk", Actor.user(bob))
    assert [c[4]["value"] for c in changes(bob)] == ["milk"]
    assert [c[4]["value"] for c in changes(alice)] == ["tea"]


# Facts, from every writer ----------------------------------------------------


MATE = {"value": "mate", "source": "user"}


def test_it_records_the_agents_and_the_pages_changes_to_facts(alice, alice_client):
    use_tool(alice, "remember_fact", category="pref", key="drink", value="tea")
    fact = Fact.objects.get(owner=alice)
    alice_client.post(
        reverse("fact-edit", args=[fact.pk]), {"category": "pref", "key": "drink", "value": "mate"}
    )
    alice_client.post(reverse("fact-delete", args=[fact.pk]))
    assert [(actor, action, old, new) for actor, _, action, old, new in changes(alice)] == [
        (
            "Agent (main)",
            "created",
            None,
            dict.fromkeys(["category", "key", "value", "source"], "(forgotten)"),
        ),
        (
            "You (alice)",
            "changed",
            dict.fromkeys(["value", "source"], "(forgotten)"),
            dict.fromkeys(["value", "source"], "(forgotten)"),
        ),
        ("You (alice)", "deleted", None, None),
    ]


def test_it_records_what_an_import_brought(alice, tmp_path):
    path = build_db(tmp_path / "aidaemon.db")
    import_aidaemon_database(path, alice, "main", ImportReport(), lambda count: None)
    by = {(c.subject_kind, c.actor) for c in Change.objects.owned_by(alice)}
    assert by == {
        (kind, "Import (aidaemon import aidaemon.db)")
        for kind in (Change.Subject.FACT, Change.Subject.TASK, Change.Subject.TERMINAL_RULE)
    }
    # Imported rules arrive switched off, and the history says so.
    rules = Change.objects.owned_by(alice).filter(subject_kind=Change.Subject.TERMINAL_RULE)
    assert {change.new_value["active"] for change in rules} == {False}


# The admin -------------------------------------------------------------------


@pytest.fixture
def root(db) -> User:
    return User.objects.create_superuser("root", password="root-password")


def test_it_records_the_admins_edits_and_deletions(alice, root):
    fact = remember(alice, "tea", Actor.agent("main"))
    admin = client_for(root)
    url = f"/admin/memory/fact/{fact.pk}/change/"
    data = {
        "owner": alice.pk,
        "category": "pref",
        "key": "drink",
        "value": "water",
        "source": "user",
    }
    assert admin.post(url, data).status_code == 302
    fact.refresh_from_db()
    assert (fact.origin, fact.origin_label) == (Fact.Origin.ADMIN, "root")
    action = {"action": "delete_selected", "_selected_action": [fact.pk], "post": "yes"}
    assert admin.post("/admin/memory/fact/", action).status_code == 302
    assert [(actor, action) for actor, _, action, _, _ in changes(alice)][1:] == [
        ("Admin (root)", "changed"),
        ("Admin (root)", "deleted"),
    ]
    # The deletion erased the values the fact had.
    assert changes(alice)[1][3:] == (
        dict.fromkeys(["value", "source"], "(forgotten)"),
        dict.fromkeys(["value", "source"], "(forgotten)"),
    )


def test_it_records_the_admin_removing_a_memory_files_index_entry(alice, root):
    row = MemoryFile.objects.create(owner=alice, path="memory/old.md", size=4, sha256="ab")
    action = {"action": "delete_selected", "_selected_action": [row.pk], "post": "yes"}
    assert client_for(root).post("/admin/memory/memoryfile/", action).status_code == 302
    assert changes(alice, Change.Subject.MEMORY_FILE) == [
        (
            "Admin (root)",
            "main:memory/old.md",
            "deleted",
            None,
            None,
        )
    ]
    assert not MemoryFile.objects.filter(pk=row.pk).exists()


def test_it_lets_the_admin_read_the_history_and_nobody_edit_it(alice, root):
    remember(alice, "tea", Actor.agent("main"))
    change = Change.objects.owned_by(alice).get()
    admin = client_for(root)
    base = "/admin/neotask_site/change/"
    assert "pref/drink" in admin.get(base).content.decode()
    assert admin.get(f"{base}{change.pk}/change/").status_code == 200  # read-only view
    assert admin.post(f"{base}{change.pk}/change/", {"subject_label": "x"}).status_code == 403
    assert admin.get(f"{base}add/").status_code == 403
    assert admin.post(f"{base}{change.pk}/delete/", {"post": "yes"}).status_code == 403
    assert Change.objects.get(pk=change.pk).subject_label == "pref/drink"


def test_it_shows_a_staff_member_with_the_view_permission_only_their_own_history(alice, bob):
    remember(alice, "tea", Actor.user(alice))
    remember(bob, "milk", Actor.user(bob))
    bob.is_staff = True
    bob.save()
    bob.user_permissions.add(Permission.objects.get(codename="view_change"))
    content = client_for(bob).get("/admin/neotask_site/change/").content.decode()
    assert "1 change" in content and ">alice<" not in content


# Memory files, terminal rules, tasks -----------------------------------------


def test_it_records_memory_file_changes_with_their_text(alice, alice_client):
    context = ToolContext.for_session(alice, "s1", "main")
    get_tool("write_memory_file").run(context, {"path": "memory/plans.md", "text": "# Plans\n"})
    get_tool("append_memory_file").run(context, {"path": "memory/plans.md", "text": "Osaka\n"})
    alice_client.post("/memory/files/delete/", {"path": "memory/plans.md", "agent": "main"})
    gone = {"text": "(forgotten)"}  # deleting it erased its text from the history
    assert changes(alice, Change.Subject.MEMORY_FILE) == [
        ("Agent (main)", "main:memory/plans.md", "created", None, gone),
        ("Agent (main)", "main:memory/plans.md", "changed", gone, gone),
        ("You (alice)", "main:memory/plans.md", "deleted", None, None),
    ]


def test_it_records_a_memory_file_saved_on_its_page(alice, alice_client):
    workspace = workspace_dir(alice.pk, "main")
    write_memory_file(workspace, "MEMORY.md", "old\n")
    page = alice_client.get("/memory/files/view/", {"path": "MEMORY.md"})
    sha = page.context["sha256"]
    alice_client.post(
        "/memory/files/view/?path=MEMORY.md", {"text": "new\n", "sha256": sha, "path": "MEMORY.md"}
    )
    assert changes(alice, Change.Subject.MEMORY_FILE) == [
        ("You (alice)", "main:MEMORY.md", "changed", {"text": "old\n"}, {"text": "new\n"})
    ]


def test_it_records_terminal_rules_allowed_switched_on_and_revoked(alice, alice_client):
    allow_terminal(alice)
    request = create_request(alice, "s1", "git status")
    decide(alice, request.pk, "always")
    rule = TerminalAllowedPrefix.objects.get(owner=alice)
    TerminalAllowedPrefix.objects.filter(pk=rule.pk).update(active=False)
    alice_client.post(reverse("terminal-prefix-activate", args=[rule.pk]))
    alice_client.post(reverse("terminal-prefix-revoke", args=[rule.pk]))
    assert [(c[0], c[2], c[3], c[4]) for c in changes(alice, Change.Subject.TERMINAL_RULE)] == [
        (
            "You (alice)",
            "created",
            None,
            {"prefix": rule.prefix, "active": True, "switched_off_because": ""},
        ),
        ("You (alice)", "changed", {"active": False}, {"active": True}),
        (
            "You (alice)",
            "deleted",
            {"prefix": rule.prefix, "active": True, "switched_off_because": ""},
            None,
        ),
    ]


def test_it_records_tasks_made_paused_and_cancelled_by_the_agent_and_the_page(alice, alice_client):
    use_tool(alice, "schedule_task", schedule="every weekday at 9am", prompt="plan my day")
    task = ScheduledTask.objects.get(owner=alice)
    use_tool(alice, "pause_task", task=str(task.pk))
    alice_client.post(reverse("task-delete", args=[task.pk]))
    recorded = changes(alice, Change.Subject.TASK)
    assert [(c[0], c[2]) for c in recorded] == [
        ("Agent (main)", "created"),
        ("Agent (main)", "changed"),
        ("You (alice)", "deleted"),
    ]
    assert recorded[1][3:] == ({"is_paused": False}, {"is_paused": True})


def test_it_records_the_tasks_of_config_toml(alice, bob):
    sync_config_tasks([config_task()], now=FRIDAY)
    sync_config_tasks([config_task(prompt="brief me briefly")], now=FRIDAY)
    sync_config_tasks([], now=FRIDAY)
    recorded = changes(alice, Change.Subject.TASK)
    assert [(c[0], c[2]) for c in recorded] == [
        ("Neotask (config.toml)", "created"),
        ("Neotask (config.toml)", "changed"),
        ("Neotask (config.toml)", "deleted"),
    ]
    assert recorded[1][3:] == ({"prompt": "brief me"}, {"prompt": "brief me briefly"})


def test_it_records_a_task_the_scheduler_paused(alice):
    task = make_task(alice)
    pause_broken(task, "no such time zone")
    assert changes(alice, Change.Subject.TASK) == [
        ("Neotask (scheduler)", "Report", "changed", {"is_paused": False}, {"is_paused": True})
    ]


@pytest.mark.django_db(transaction=True)
def test_it_records_a_one_time_task_its_run_ended(alice, llm):
    make_task(alice, cron_expr="30 14 8 6 *", is_oneshot=True)
    llm.script(Reply(text="Reminder sent."))
    assert run_due_tasks(now=MONDAY_9).runs[0].status == "completed"
    recorded = changes(alice, Change.Subject.TASK)
    assert [(c[0], c[1], c[2], c[4]) for c in recorded] == [
        ("Neotask (scheduler)", "Report", "deleted", None)
    ]
    assert recorded[0][3]["is_oneshot"] is True


@pytest.mark.django_db(transaction=True)
def test_it_names_the_task_whose_run_changed_a_fact(alice, llm):
    make_task(alice)
    llm.script(
        reply_with_tool("remember_fact", {"category": "pref", "key": "drink", "value": "tea"}),
        Reply(text="Saved."),
    )
    assert run_due_tasks(now=MONDAY_9).runs[0].status == "completed"
    assert [(c[0], c[2]) for c in changes(alice, Change.Subject.FACT)] == [
        ("Scheduled task (Report)", "created")
    ]


def test_it_records_what_a_neotask_export_brought_and_marks_its_facts(alice, bob, tmp_path):
    build_user_data(alice)
    archive = tmp_path / "alice.zip"
    export_user(alice, archive)
    import_archive(archive, bob)
    actor = "Import (Neotask export alice.zip)"
    kinds = {c.subject_kind for c in Change.objects.owned_by(bob) if c.actor == actor}
    # MCP servers, the calls allowed on them and API tokens are not exported
    # (docs/data.md); model providers are the site's.
    assert kinds == set(Change.Subject.values) - {
        Change.Subject.MCP_CALL,
        Change.Subject.MCP_SERVER,
        Change.Subject.API_TOKEN,
        Change.Subject.MODEL_PROVIDER,
    }
    assert not Change.objects.owned_by(bob).exclude(actor_label="Neotask export alice.zip")
    facts = Fact.objects.filter(owner=bob)
    # A fact keeps the turn it came from when the turn came along; the others
    # came from the import.
    assert facts and {(f.origin, f.origin_label) for f in facts} == {
        (Fact.Origin.IMPORT, "Neotask export alice.zip"),
        (Fact.Origin.TURN, ""),
    }
