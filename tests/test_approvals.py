from __future__ import annotations

import pytest

from agent.approvals import ApprovalError, create_request, decide, is_allowed
from agent.models import TerminalAllowedPrefix
from agent.rules import has_control_operators, rule_for
from tests.helpers import allow_terminal


@pytest.mark.parametrize(
    ("command", "prefix"),
    [
        ("ls -la /tmp", "ls"),
        ("  git   status -s ", "git status"),
        ("npm ci", "npm ci"),
        ("echo hello world", "echo"),
        ("cat /etc/hosts", "cat"),
        ("find . -name '*.md'", "find"),
        ("make build", "make build"),
        ("tar -czf notes.tgz memory", "tar"),
        ("'ls' -l", "ls"),
    ],
)
def test_it_remembers_the_program_and_subcommand(command, prefix):
    assert rule_for(command).prefix == prefix


# Each can run any program: "Allow always" is not offered, and no stored rule covers it.
RUNS_OTHER_PROGRAMS = [
    ("sh -c 'id'", "sh is an interpreter"),
    ("bash script.sh", "bash is an interpreter"),
    ("python3 --version", "python3 is an interpreter"),
    ("python3.11 -c 1", "python3.11 is an interpreter"),
    ("node -e 1", "node is an interpreter"),
    ("perl -e 1", "perl is an interpreter"),
    ("ruby -e 1", "ruby is an interpreter"),
    ("env ls", "env runs other programs"),
    ("xargs rm", "xargs runs other programs"),
    ("sudo ls", "sudo runs other programs"),
    ("awk '{print}' notes", "awk runs other programs"),
    ("sed -n 1p notes", "sed runs other programs"),
    ("nohup ls", "nohup runs other programs"),
    ("timeout 5 ls", "timeout runs other programs"),
    ("find . -exec sh -c id +", "find -exec runs"),
    ("find . -name x -execdir id +", "find -execdir runs"),
    ("find . -ok rm '{}' +", "find -ok runs"),
    ("find . -delete", "find -delete runs"),
    ("find . '-e'xec id +", "find -exec runs"),
    ("git -c core.pager=sh log", "git options before the subcommand"),
    ("git -C /tmp status", "git options before the subcommand"),
    ("git --exec-path=/tmp status", "git options before the subcommand"),
    ("git log --config=x", "git --config runs"),
    ("git fetch --upload-pack=touch", "git --upload-pack runs"),
    ("git config core.pager sh", "git config runs"),
    ("git rebase -x id", "git rebase runs"),
    ("make -f evil.mk", "make -f runs"),
    ("make --file=evil.mk", "make --file runs"),
    ("make SHELL=/bin/sh all", "make variables"),
    ("npm run build", "npm run runs"),
    ("npm exec cowsay", "npm exec runs"),
    ("uv run pytest", "uv run runs"),
    ("poetry run pytest", "poetry run runs"),
    ("npx cowsay", "npx runs other programs"),
    ("tar -xf a.tar --to-command=sh", "tar --to-command runs"),
    ("tar -xIsh -f a.tar", "tar -xIsh runs"),
    ("tar xIf sh a.tar", "tar xIf runs"),
    ("FOO=1 ls", "sets environment variables"),
    ("./build.sh", "by a path"),
    ("/usr/bin/ls", "by a path"),
    ("ls $(id)", "chains, substitutes or redirects"),
    ("cat 'unbalanced", "does not parse"),
]


@pytest.mark.parametrize(("command", "reason"), RUNS_OTHER_PROGRAMS)
def test_it_never_remembers_what_runs_other_programs(command, reason):
    rule = rule_for(command)
    assert rule.prefix is None
    assert reason in rule.reason
    assert rule.reason.startswith("“Allow always” is not offered: ")


@pytest.mark.parametrize(("command", "reason"), RUNS_OTHER_PROGRAMS)
def test_it_lets_no_stored_rule_cover_what_runs_other_programs(alice, command, reason):
    """Rules stored before these checks existed, or brought by an import."""
    program = command.split()[0]
    for prefix in {program, " ".join(command.split()[:2]), "find", "git log", "tar", "make"}:
        TerminalAllowedPrefix.objects.get_or_create(owner=alice, prefix=prefix)
    assert not is_allowed(alice, command)


def test_it_wants_a_subcommand_for_tools_that_have_them():
    assert rule_for("git --no-pager log").prefix is None
    assert rule_for("git").reason == "“Allow always” needs a git subcommand to remember."


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


def test_it_ignores_prefixes_that_are_switched_off(alice):
    TerminalAllowedPrefix.objects.create(owner=alice, prefix="ls", active=False)
    assert not is_allowed(alice, "ls")


def test_it_applies_a_decision_once_for_the_owner_with_permission(alice, bob):
    allow_terminal(alice)
    request = create_request(alice, "s1", "git status -s")
    assert request.prefix == "git status"
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


def test_it_refuses_always_for_a_command_that_runs_other_programs(admin_user):
    for command in ("ls; rm -rf /", "python3 --version"):
        request = create_request(admin_user, "s1", command)
        assert request.prefix == ""
        with pytest.raises(ApprovalError, match="not offered"):
            decide(admin_user, request.pk, "always")
        assert decide(admin_user, request.pk, "once").status == "approved"
    assert not TerminalAllowedPrefix.objects.exists()


def test_it_switches_an_inactive_prefix_on_when_always_is_chosen_again(admin_user):
    TerminalAllowedPrefix.objects.create(owner=admin_user, prefix="ls", active=False)
    decide(admin_user, create_request(admin_user, "s1", "ls -l").pk, "always")
    assert TerminalAllowedPrefix.objects.get().active


def test_it_reads_the_permission_afresh_for_each_decision(alice):
    allow_terminal(alice)
    first = create_request(alice, "s1", "ls")
    decide(alice, first.pk, "once")
    alice.user_permissions.clear()  # revoked while alice's object lives on
    second = create_request(alice, "s1", "ls")
    with pytest.raises(ApprovalError, match="permission"):
        decide(alice, second.pk, "once")


@pytest.mark.parametrize("bad_id", ["not-a-uuid", "", None, 42])
def test_it_rejects_malformed_request_ids(alice, bad_id):
    with pytest.raises(ApprovalError):
        decide(alice, bad_id, "once")
