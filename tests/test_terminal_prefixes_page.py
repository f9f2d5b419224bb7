"""The terminal prefixes page: the commands always allowed, revoked and switched on."""

from __future__ import annotations

from pathlib import Path

from django.urls import reverse

from agent import cgroups
from agent.models import TerminalAllowedPrefix
from tests.support.records import allow_terminal
from tests.support.web import ESCAPED, HTMX, XSS, text


def test_it_lists_and_revokes_terminal_prefixes(alice_client, alice):
    allowed = TerminalAllowedPrefix.objects.create(owner=alice, prefix="git status")
    page = text(alice_client.get(reverse("terminal-prefixes")))
    assert "<html" in page and "git status" in page and "hx-confirm=" in page
    assert reverse("terminal-prefixes") in text(alice_client.get(reverse("api-tokens")))
    assert "<html" not in text(alice_client.get(reverse("terminal-prefixes"), **HTMX))

    response = alice_client.post(reverse("terminal-prefix-revoke", args=[allowed.pk]), **HTMX)
    assert response.status_code == 200 and text(response) == ""
    assert not TerminalAllowedPrefix.objects.exists()
    assert "No command is always allowed" in text(alice_client.get(reverse("terminal-prefixes")))


def test_it_revokes_a_prefix_without_htmx(alice_client, alice):
    allowed = TerminalAllowedPrefix.objects.create(owner=alice, prefix="ls")
    response = alice_client.post(reverse("terminal-prefix-revoke", args=[allowed.pk]))
    assert response.status_code == 302
    assert "Revoked “ls”" in text(alice_client.get(reverse("terminal-prefixes")))


def test_it_lets_only_a_user_with_the_permission_switch_on_an_imported_prefix(alice_client, alice):
    imported = TerminalAllowedPrefix.objects.create(owner=alice, prefix="git log", active=False)
    url = reverse("terminal-prefix-activate", args=[imported.pk])
    page = text(alice_client.get(reverse("terminal-prefixes")))
    assert "not yet switched on" in page and url not in page
    alice_client.post(url)
    imported.refresh_from_db()
    assert not imported.active
    allow_terminal(alice)
    assert url in text(alice_client.get(reverse("terminal-prefixes")))
    assert alice_client.post(url).status_code == 302
    imported.refresh_from_db()
    assert imported.active


UPGRADE = (
    "Switched off by the upgrade to the allow-list: find can run programs (-exec, -execdir, -ok)"
)


def test_it_keeps_a_rule_the_allow_list_refuses_off_and_says_why(alice_client, alice):
    allow_terminal(alice)
    old = TerminalAllowedPrefix.objects.create(
        owner=alice, prefix="find", active=False, switched_off_because=f"{UPGRADE}."
    )
    url = reverse("terminal-prefix-activate", args=[old.pk])
    page = text(alice_client.get(reverse("terminal-prefixes")))
    assert f"Off — {UPGRADE}" in page and url not in page
    response = alice_client.post(url, follow=True)
    assert "“find” stays off: find can run programs" in text(response)
    old.refresh_from_db()
    assert not old.active and old.switched_off_because


def test_it_switches_on_a_rule_the_allow_list_allows_again(alice_client, alice):
    allow_terminal(alice)
    old = TerminalAllowedPrefix.objects.create(
        owner=alice, prefix="git log", active=False, switched_off_because="By an upgrade."
    )
    url = reverse("terminal-prefix-activate", args=[old.pk])
    assert url in text(alice_client.get(reverse("terminal-prefixes")))
    alice_client.post(url)
    old.refresh_from_db()
    assert old.active and old.switched_off_because == ""


def test_it_says_what_a_refused_rule_covers_however_it_was_stored(alice_client, alice):
    allow_terminal(alice)
    TerminalAllowedPrefix.objects.create(owner=alice, prefix="make build")  # in the admin
    imported = TerminalAllowedPrefix.objects.create(owner=alice, prefix="tar", active=False)
    page = text(alice_client.get(reverse("terminal-prefixes")))
    assert "Covers nothing: make runs the commands of a Makefile" in page
    assert "imported, not yet switched on; the allow-list does not allow it: tar can" in page
    assert reverse("terminal-prefix-activate", args=[imported.pk]) not in page


def test_it_answers_404_to_switching_on_someone_elses_prefix(alice, bob, bob_client):
    imported = TerminalAllowedPrefix.objects.create(owner=alice, prefix="ls", active=False)
    allow_terminal(bob)
    response = bob_client.post(reverse("terminal-prefix-activate", args=[imported.pk]))
    assert response.status_code == 404
    imported.refresh_from_db()
    assert not imported.active


def test_it_warns_on_the_approvals_page_when_the_sandbox_is_off(alice_client, configure):
    configure("terminal", enabled=True)
    assert "sandbox is off" not in text(alice_client.get(reverse("terminal-prefixes")))
    configure("terminal", enabled=True, sandbox="none")
    assert "sandbox is off" in text(alice_client.get(reverse("terminal-prefixes")))


def test_it_escapes_prefixes(alice_client, alice):
    TerminalAllowedPrefix.objects.create(owner=alice, prefix=XSS)
    page = text(alice_client.get(reverse("terminal-prefixes")))
    assert XSS not in page and ESCAPED in page


def test_it_keeps_each_users_prefixes_apart(alice, bob_client):
    allowed = TerminalAllowedPrefix.objects.create(owner=alice, prefix="alice-only-cmd")
    assert "alice-only-cmd" not in text(bob_client.get(reverse("terminal-prefixes")))
    response = bob_client.post(reverse("terminal-prefix-revoke", args=[allowed.pk]), **HTMX)
    assert response.status_code == 404
    assert TerminalAllowedPrefix.objects.filter(pk=allowed.pk).exists()


def test_it_sends_anonymous_visitors_to_log_in(client, alice):
    response = client.get(reverse("terminal-prefixes"))
    assert response.status_code == 302
    assert "/accounts/login/" in response["Location"]


def test_it_says_which_limits_bind_the_whole_sandbox(alice_client, configure, monkeypatch):
    configure("terminal", enabled=True, memory_mb=512, max_processes=16, workspace_mb=300)
    monkeypatch.setattr(cgroups, "find_parent", lambda controller: None)
    page = alice_client.get(reverse("terminal-prefixes")).content.decode()
    assert "32 MB of address space per process, 16 processes at most" in page
    assert "RLIMIT_NPROC" in page and "may hold 300 MB" in page
    monkeypatch.setattr(cgroups, "find_parent", lambda c: cgroups.Parent(Path("/x"), v2=True))
    page = alice_client.get(reverse("terminal-prefixes")).content.decode()
    assert "512 MB for the whole sandbox (a memory cgroup)" in page
    assert "processes: 16 (a pids cgroup)" in page
