"""Covered git commands with a hostile repository in the workspace, in the real
sandbox (and unconfined): whatever .git/config, .gitattributes, hooks, a
submodule or $HOME hold, a read never runs the program they name.

Two layers: a rule covers a git command only while the repository's config holds
nothing but keys known to be harmless (else the card asks), and every git run
gets a fixed configuration that outranks the repository's (agent.safe_git).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.models import TerminalAllowedPrefix
from agent.safe_git import config_problem, hardened
from agent.tools import ToolContext, get_tool
from memory.workspace import workspace_dir
from tests.support.records import allow_terminal
from tests.support.tools import run_terminal

pytestmark = pytest.mark.django_db

COMMANDS = ["git status", "git diff", "git log -p", "git show"]


def git(repo: Path, *arguments: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *arguments],
        cwd=repo,
        check=True,
        capture_output=True,
        env={"PATH": "/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(repo)},
    )


@dataclass(frozen=True)
class Terminal:
    context: ToolContext
    root: str  # the workspace as the command sees it

    @property
    def workspace(self) -> Path:
        return self.context.workspace


@pytest.fixture(params=["bwrap", "none"])
def terminal(request, alice, configure) -> Terminal:
    """Alice's terminal, holding a repository with a changed file and rules for
    each read command; memory/p.md is the script a hostile config names."""
    configure("terminal", enabled=True, sandbox=request.param, timeout_seconds=10.0)
    allow_terminal(alice)
    workspace = workspace_dir(alice.pk, "main")
    git(workspace, "init", "-q")
    (workspace / "a.txt").write_text("one\n")
    git(workspace, "add", "a.txt")
    git(workspace, "commit", "-qm", "one")
    (workspace / "a.txt").write_text("two\n")
    git(workspace, "commit", "-qam", "two")
    (workspace / "a.txt").write_text("three\n")
    for rule in ("git status", "git diff", "git log", "git show"):
        TerminalAllowedPrefix.objects.create(owner=alice, prefix=rule)
    root = "/workspace" if request.param == "bwrap" else str(workspace)
    evil = workspace / "memory" / "p.md"
    evil.parent.mkdir(exist_ok=True)
    evil.write_text(f'#!/bin/sh\necho "$0 $*" >> {root}/ran\ncat\n')
    evil.chmod(0o755)
    return Terminal(ToolContext(alice, "s1", "main", workspace), root)


def asks(terminal: Terminal, command: str) -> bool:
    subject = get_tool("terminal").approval_subject
    assert subject is not None
    return subject(terminal.context, {"command": command}) == command


def run(terminal: Terminal, command: str) -> str:
    """As after "Allow once", or as a covered command runs."""
    return run_terminal(terminal.context, command)


def ran(terminal: Terminal) -> str:
    marker = terminal.workspace / "ran"
    return marker.read_text() if marker.exists() else ""


def plant(terminal: Terminal, config: str = "", attributes: str = "") -> None:
    with (terminal.workspace / ".git" / "config").open("a") as file:
        file.write(config.replace("EVIL", f"{terminal.root}/memory/p.md"))
    (terminal.workspace / ".gitattributes").write_text(attributes)
    (terminal.workspace / "a.txt").touch()  # stat-dirty: git reads the file again


@pytest.mark.slow
def test_it_covers_the_reads_of_an_ordinary_repository(terminal):
    for command in COMMANDS:
        assert not asks(terminal, command)
        assert run(terminal, command).startswith("exit code 0\n")
    assert "three" in run(terminal, "git diff")
    assert ran(terminal) == ""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("config", "attributes"),
    [
        ("[core]\n\tfsmonitor = EVIL\n", ""),
        ('[diff "t"]\n\ttextconv = EVIL\n', "a.txt diff=t\n"),
        ('[diff "t"]\n\tcommand = EVIL\n', "a.txt diff=t\n"),
        ("[diff]\n\texternal = EVIL\n", ""),
        ("[core]\n\tpager = EVIL\n[pager]\n\tlog = EVIL\n", ""),
        ("[core]\n\thooksPath = memory\n", ""),
    ],
    ids=["fsmonitor", "textconv", "diff-driver", "diff-external", "pager", "hooks-path"],
)
def test_it_runs_no_program_the_repository_config_names(terminal, config, attributes):
    hook = terminal.workspace / "memory" / "post-index-change"
    hook.symlink_to("p.md")
    plant(terminal, config, attributes)
    for command in COMMANDS:
        assert asks(terminal, command), command  # the rule does not cover it here
        run(terminal, command)  # and should it run (allowed once), it runs nothing
        assert ran(terminal) == "", command


@pytest.mark.slow
@pytest.mark.parametrize(
    "config",
    [
        '[filter "t"]\n\tclean = EVIL\n\tsmudge = EVIL\n',
        '[filter "t"]\n\tprocess = EVIL\n',
        "[include]\n\tpath = ../memory/cfg.md\n",
        '[includeIf "gitdir:/"]\n\tpath = ../memory/cfg.md\n',
        "[log]\n\tshowSignature = true\n[gpg]\n\tprogram = EVIL\n",
        '[extensions]\n\tpartialClone = origin\n[remote "origin"]\n\tpromisor = true\n',
    ],
    ids=["clean-filter", "process-filter", "include", "include-if", "gpg", "partial-clone"],
)
def test_it_asks_when_the_repository_config_holds_what_it_does_not_know(terminal, config):
    """No fixed setting switches these off (a filter is named in .gitattributes
    and defined under any name): a rule does not cover git there."""
    cfg = f"[core]\n\tfsmonitor = {terminal.root}/memory/p.md\n"
    (terminal.workspace / "memory" / "cfg.md").write_text(cfg)
    plant(terminal, config, "a.txt filter=t\n")
    for command in COMMANDS:
        assert asks(terminal, command), command
    assert ran(terminal) == ""


@pytest.mark.slow
def test_it_never_runs_a_hook_of_the_repository(terminal):
    hook = terminal.workspace / ".git" / "hooks" / "post-index-change"
    hook.write_text(f"#!/bin/sh\nexec {terminal.root}/memory/p.md hook\n")
    hook.chmod(0o755)
    plant(terminal)
    for command in COMMANDS:
        run(terminal, command)
    assert ran(terminal) == ""


@pytest.mark.slow
def test_it_ignores_a_gitconfig_planted_in_home(terminal):
    """The issue's three rules: `cp memory/cfg.md .gitconfig`, `git init`, `git status`."""
    root = terminal.root
    hostile = (
        f'[core]\n\tfsmonitor = {root}/memory/p.md\n[filter "t"]\n\tclean = {root}/memory/p.md\n'
    )
    (terminal.workspace / ".gitconfig").write_text(hostile)
    (terminal.workspace / ".config" / "git").mkdir(parents=True)
    (terminal.workspace / ".config" / "git" / "config").write_text(hostile)
    (terminal.workspace / ".config" / "git" / "attributes").write_text("* filter=t\n")
    plant(terminal, attributes="a.txt filter=t\n")
    for command in COMMANDS:
        assert not asks(terminal, command), command
        assert run(terminal, command).startswith("exit code 0\n"), command
    assert ran(terminal) == ""


@pytest.mark.slow
def test_it_runs_nothing_of_a_hostile_submodule(terminal):
    workspace = terminal.workspace
    root = terminal.root
    inner = workspace / "sub"
    inner.mkdir()
    git(inner, "init", "-q")
    (inner / "s.txt").write_text("s\n")
    git(inner, "add", "s.txt")
    git(inner, "commit", "-qm", "s")
    git(workspace, "-c", "protocol.file.allow=always", "submodule", "add", "-q", "./sub", "sub")
    git(workspace, "commit", "-qm", "sub")
    with (inner / ".git" / "config").open("a") as file:
        evil = f"{root}/memory/p.md"
        file.write(f'[core]\n\tfsmonitor = {evil}\n[filter "t"]\n\tclean = {evil}\n')
    (workspace / "sub" / ".gitattributes").write_text("s.txt filter=t\n")
    (workspace / "sub" / "s.txt").touch()
    (workspace / ".gitmodules").write_text(
        '[submodule "sub"]\n\tpath = sub\n\turl = ./sub\n\tignore = none\n'
    )
    for command in COMMANDS:
        run(terminal, command)
    assert ran(terminal) == ""


@pytest.mark.parametrize(
    ("command", "runs"),
    [
        ("git status -s", "git status --ignore-submodules -s"),
        (
            "git --no-pager log -p -- 'a b'",
            "git --no-pager log --no-ext-diff --no-textconv --ignore-submodules -p -- 'a b'",
        ),
        ("git show HEAD", "git show --no-ext-diff --no-textconv --ignore-submodules HEAD"),
        ("git branch -a", "git branch -a"),
        ("git log --ext-diff", "git log --ext-diff"),  # not the table's: as allowed once
        ("ls; git log", "ls; git log"),
    ],
)
def test_it_keeps_drivers_and_submodules_out_of_a_git_read(command, runs):
    assert hardened(command) == runs


@pytest.mark.parametrize(
    ("listing", "problem"),
    [
        (b"command\0core.fsmonitor\nfalse\0", None),
        (b"local\0core.bare\nfalse\0local\0remote.origin.url\next::sh p.md\0", None),
        (b"local\0branch.a.b.merge\nrefs/heads/a.b\0", None),
        (b"local\0filter.t.clean\nsh p.md\0", "sets filter.t.clean (local)"),
        (b"local\0core.bare\0worktree\0core.worktree\n/\0", "sets core.worktree (worktree)"),
        (b"local\0user.name\nx\ny\0local\0diff.t.textconv\nsh\0", "sets diff.t.textconv"),
    ],
)
def test_it_trusts_only_the_repository_keys_it_knows(listing, problem):
    found = config_problem(0, listing)
    assert (found is None) == (problem is None)
    assert problem is None or problem in found


def test_it_trusts_no_config_that_git_could_not_list():
    assert "could not list" in config_problem(128, b"fatal: bad config line 1")
    assert "could not list" in config_problem(None, b"")


@pytest.mark.slow
def test_it_finds_no_repository_above_the_workspace(alice, configure, settings):
    """Unconfined, git would walk up from a workspace with no .git of its own into
    a repository around the data dir (a data dir inside a clone of Neotask)."""
    configure("terminal", enabled=True, sandbox="none", timeout_seconds=10.0)
    allow_terminal(alice)
    git(Path(settings.DATA_DIR), "init", "-q")
    context = ToolContext(alice, "s1", "main", workspace_dir(alice.pk, "main"))
    output = get_tool("terminal").run(context, {"command": "git rev-parse --show-toplevel"})
    assert output.startswith("exit code 128\n") and "not a git repository" in output
