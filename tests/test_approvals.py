from __future__ import annotations

import pytest

from agent.approvals import ApprovalError, create_request, decide, is_allowed
from agent.models import TerminalAllowedPrefix
from agent.rules import NotCovered, rule_for, rule_problem, words_of
from tests.support.records import allow_terminal


@pytest.mark.parametrize(
    ("command", "prefix"),
    [
        ("ls -la /tmp", "ls"),
        ("  git   status -s ", "git status"),
        ("git --no-pager log -5 --oneline", "git log"),
        ("git log -n5 --format=%h HEAD~3..HEAD -- memory", "git log"),
        ("git log 'HEAD@{1}'", "git log"),
        ("git diff -U1 --stat", "git diff"),
        ("git branch -a --list 'fix*'", "git branch"),
        ("echo hello world", "echo"),
        ("cat /etc/hosts", "cat"),
        ("grep -rn 'TODO:' memory", "grep"),
        ('grep -i "two words" notes.md', "grep"),
        ("grep --regexp=-x -e-y -- -z", "grep"),
        ("head -n5 notes.md", "head"),
        ("tail -20 notes.md", "tail"),
        ("date +%Y-%m-%d", "date"),
        ("diff -u a.md b.md", "diff"),
        ("'ls' -l", "ls"),
    ],
)
def test_it_remembers_the_program_and_git_subcommand(command, prefix):
    assert rule_for(command).prefix == prefix


# Outside the allow-list: "Allow always" is not offered, and no stored rule covers it.
NOT_COVERED = [
    ("sh -c 'id'", "sh is an interpreter"),
    ("python3 --version", "python3 is an interpreter"),
    ("env ls", "env runs the program named in its arguments"),
    ("find . -name x", "find can run programs"),
    ("tar -tf a.tar", "tar can run programs"),
    ("make build", "make runs the commands of a Makefile"),
    ("npm ci", "npm runs code of the project"),
    ("sed -n 1p notes", "sed can run commands"),
    ("nmap localhost", "nmap is not one of the programs a rule may cover (ls, cat,"),
    ("git push", "git push is not a subcommand a rule may cover (status, log,"),
    ("git", "git needs one of its subcommands"),
    ("git -c core.pager=sh log", "git -c before the subcommand"),
    ("ls --colo", "ls --colo is not an option a rule may cover"),
    ("ls -laZ", "ls -Z is not an option"),
    ("head -n", "head -n needs a value"),
    ("head -n -5 notes", "the value of head -n starts with -"),
    ("cat -", "cat - reads standard input"),
    ("git log -pn1", "git log reads -pn1 as one option"),
    ("pwd x", "pwd takes at most 0 file name(s)"),
    ("date 01010000", "date sets the clock"),
    ("git branch new", "git branch creates a branch"),
    ("git log --format=%GK", "runs gpg"),
    ("FOO=1 ls", "sets environment variables"),
    ("./build.sh", "by a path"),
    ("/usr/bin/ls", "by a path"),
    ("ls $(id)", "expands $"),
    ('ls "$HOME"', "expands $, ` and \\ inside double quotes"),
    ("cat 'unbalanced", "not closed"),
]


@pytest.mark.parametrize(("command", "reason"), NOT_COVERED)
def test_it_offers_no_rule_outside_the_allow_list(command, reason):
    rule = rule_for(command)
    assert rule.prefix is None
    assert reason in rule.reason
    assert rule.reason.startswith("“Allow always” is not offered: ")


@pytest.mark.parametrize(("command", "reason"), NOT_COVERED)
def test_it_lets_no_stored_rule_cover_what_the_allow_list_refuses(alice, command, reason):
    """Rules stored before the allow-list, by an import or in the admin."""
    for prefix in {command.split()[0], " ".join(command.split()[:2]), "find", "git log"}:
        TerminalAllowedPrefix.objects.get_or_create(owner=alice, prefix=prefix)
    assert not is_allowed(alice, command)


@pytest.mark.parametrize(
    ("prefix", "problem"),
    [
        ("ls", None),
        ("git log --oneline", None),
        ("find", "find can run programs (-exec, -execdir, -ok) and delete files"),
        ("git", "git needs one of its subcommands"),
        ("make build", "make runs the commands of a Makefile"),
    ],
)
def test_it_says_why_the_allow_list_refuses_a_stored_rule(prefix, problem):
    assert (rule_problem(prefix) or "").startswith(problem or "")
    assert (rule_problem(prefix) is None) == (problem is None)


@pytest.mark.parametrize(
    "command",
    [
        "ls; rm -rf ~",
        "ls && rm x",
        "ls || true",
        "ls | sh",
        "echo `id`",
        "echo $(id)",
        "echo ${U:-x}",
        "ls > out",
        "cat < in",
        "ls\nrm x",
        "sleep 9 &",
        "ls *.md",
        "ls ~",
        "ls a=~/x",
        "ls =ls",
        "ls {a,b}",
        "ls \\x",
        "ls (x)",
        "ls #x",
        "echo \x07",
    ],
)
def test_it_refuses_whatever_the_shell_would_expand_or_chain(command):
    with pytest.raises(NotCovered):
        words_of(command.replace("\\x07", "\x07"))


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
    TerminalAllowedPrefix.objects.create(
        owner=admin_user, prefix="ls", active=False, switched_off_because="By an upgrade."
    )
    decide(admin_user, create_request(admin_user, "s1", "ls -l").pk, "always")
    rule = TerminalAllowedPrefix.objects.get()
    assert rule.active and rule.switched_off_because == ""


def test_it_lets_a_longer_rule_cover_only_the_commands_that_start_with_it(alice):
    TerminalAllowedPrefix.objects.create(owner=alice, prefix="git log --oneline")
    assert is_allowed(alice, "git log --oneline -5")
    assert is_allowed(alice, "git --no-pager log --oneline")
    assert not is_allowed(alice, "git log -5 --oneline")
    assert not is_allowed(alice, "git log")


def test_it_lets_a_rule_the_allow_list_refuses_cover_nothing_even_when_on(alice):
    TerminalAllowedPrefix.objects.create(owner=alice, prefix="find", active=True)
    assert not is_allowed(alice, "find .")


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
