from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User

from agent.approvals import (
    ApprovalError,
    create_request,
    decide,
    has_control_operators,
    is_allowed,
    suggested_prefix,
)
from agent.models import TerminalAllowedPrefix


@pytest.mark.parametrize(
    ("command", "prefix"),
    [
        ("ls -la /tmp", "ls"),
        ("  git   status -s ", "git status"),
        ("git --no-pager log", "git"),
        ("npm run build", "npm run"),
        ("echo hello world", "echo"),
        ("cat /etc/hosts", "cat"),
        ("python3 script.py", "python3"),
    ],
)
def test_it_suggests_the_program_and_subcommand_as_prefix(command, prefix):
    assert suggested_prefix(command) == prefix


@pytest.mark.parametrize(
    "command",
    [
        "ls; rm -rf ~",
        "ls && rm x",
        "ls || true",
        "ls | sh",
        "echo `id`",
        "echo $(id)",
        "ls > out",
        "cat < in",
        "ls\nrm x",
        "sleep 9 &",
    ],
)
def test_it_recognises_shell_control_operators(command):
    assert has_control_operators(command)


def test_it_allows_only_commands_under_an_approved_prefix(alice, bob):
    TerminalAllowedPrefix.objects.create(owner=alice, prefix="git status")
    assert is_allowed(alice, "git status")
    assert is_allowed(alice, "git  status -s")
    assert not is_allowed(alice, "git statusx")
    assert not is_allowed(alice, "git push")
    assert not is_allowed(alice, "git status; rm -rf ~")
    assert not is_allowed(alice, "git status $(rm -rf ~)")
    assert not is_allowed(bob, "git status")


def test_it_applies_a_decision_once_for_the_owner_with_permission(alice, bob):
    alice.user_permissions.add(Permission.objects.get(codename="use_terminal"))
    alice = User.objects.get(pk=alice.pk)  # permissions are cached per instance
    request = create_request(alice, "s1", "git status -s")
    with pytest.raises(ApprovalError, match="no such approval request"):
        decide(bob, request.pk, "always")
    with pytest.raises(ApprovalError, match="'once', 'always' or 'deny'"):
        decide(alice, request.pk, "sure")
    decided = decide(alice, request.pk, "always")
    assert (decided.status, decided.decision) == ("approved", "always")
    assert list(TerminalAllowedPrefix.objects.values_list("owner__username", "prefix")) == [
        ("alice", "git status")
    ]
    with pytest.raises(ApprovalError, match="already answered"):
        decide(alice, request.pk, "deny")


def test_it_refuses_decisions_without_the_terminal_permission(alice):
    request = create_request(alice, "s1", "ls")
    with pytest.raises(ApprovalError, match="permission"):
        decide(alice, request.pk, "once")
    request.refresh_from_db()
    assert request.status == "pending"


def test_it_stores_no_prefix_for_a_chained_command(admin_user):
    request = create_request(admin_user, "s1", "ls; rm -rf /")
    decide(admin_user, request.pk, "always")
    assert not TerminalAllowedPrefix.objects.exists()


@pytest.mark.parametrize("bad_id", ["not-a-uuid", "", None, 42])
def test_it_rejects_malformed_request_ids(alice, bad_id):
    with pytest.raises(ApprovalError):
        decide(alice, bad_id, "once")
