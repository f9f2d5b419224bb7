""" "Allow always" as an allow-list: each attack of issue 24 (finding 2), with the
rule the attacker had stored, comes out "not covered"; and no command built from
the table's own grammar is covered once the shell would expand or chain anything.
"""

from __future__ import annotations

import pytest

from agent.models import ApprovalRequest, TerminalAllowedPrefix
from agent.rules import covers, rule_for
from memory.workspace import workspace_dir
from scheduler.runner import run_due_tasks
from tests.helpers import MONDAY_9, allow_terminal, make_task
from tests.scripted_llm import Reply, reply_with_tool

P = "sh memory/p.md"  # the script the agent wrote with write_memory_file, unasked

# (the stored rule, the command the agent then ran): each ran the script.
ATTACKS = [
    ("find", "find . -maxdepth 0 ${U:--exec} sh memory/p.md {} +"),
    ("find", "find . -maxdepth 0 ${U:--exec} sh memory/p.md ;"),
    ("tar", f"tar -cf /tmp/x.tar --checkpoint=1 --checkpoint-a=exec='{P}' memory"),
    ("tar", f"tar -cf /tmp/x.tar --checkpoint=1 --checkpoint-act=exec='{P}' memory"),
    ("tar", f"tar -cf /tmp/x.tar --checkpoint=1 --checkpoint-action=exec='{P}' memory"),
    ("split", f"split --filt='{P}' memory/a.md"),
    ("split", f"split --filter='{P}' memory/a.md"),
    ("make build", "make build --ev='x:=${shell sh memory/p.md}'"),
    ("make build", "make build --eval='x:=$(shell sh memory/p.md)'"),
    ("git clone", f"git clone -u '{P}' x y"),
    ("git clone", f"git clone --upload-pack='{P}' x y"),
    ("git grep", f"git grep -O'{P}' x"),
    ("git grep", f"git grep --open-files-in-pager='{P}' x"),
    ("taskset", f"taskset 1 {P}"),
    ("chrt", f"chrt 0 {P}"),
    ("setarch", f"setarch x86_64 {P}"),
    ("linux64", f"linux64 {P}"),
    ("ssh-agent", f"ssh-agent {P}"),
    ("rbash", "rbash memory/p.md"),
    ("sqlite3", f"sqlite3 :memory: '.shell {P}'"),
    ("gcc", "gcc -wrapper sh,memory/p.md -x c /dev/null"),
    ("groff", "groff -U memory/p.md"),
    ("view", f"view -c '!{P}' memory/a.md"),
    # Three harmless-looking rules together plant a .gitconfig whose
    # core.fsmonitor git status runs (tests/security/test_safe_git.py runs it).
    ("cp", "cp memory/cfg.md .gitconfig"),
    ("git init", "git init"),
    # Rules the table does allow, with what the shell adds or the tool hides.
    ("ls", "ls ${U:--la} memory"),
    ("ls", "ls $(sh memory/p.md)"),
    ("ls", "ls `sh memory/p.md`"),
    ("ls", 'ls "$(sh memory/p.md)"'),
    ("ls", "ls memory/*"),
    ("ls", "ls ~/memory"),
    ("ls", "ls {memory,/}"),
    ("ls", "ls memory; sh memory/p.md"),
    ("ls", "ls memory | sh"),
    ("ls", "ls > memory/p.md"),
    ("ls", "U=1 ls"),
    ("ls", "/bin/ls"),
    ("ls", "ls\nsh memory/p.md"),
    ("ls", "ls --colo=never"),  # an abbreviation: only full option names
    ("cat", "cat -- memory/a.md & sh memory/p.md"),
    ("grep", "grep -r x memory/ --include=\\*.md"),
    ("sort", "sort --compress-program=sh memory/a.md"),
    ("sort", "sort -o memory/p.md memory/a.md"),
    ("uniq", "uniq memory/a.md memory/p.md"),  # the second name is where it writes
    ("date", "date 01010000"),  # sets the clock
    ("git log", "git log --output=memory/p.md -p"),
    ("git log", "git log --ext-diff -p"),
    ("git log", "git log --textconv -p"),
    ("git log", "git log '--format=%G?'"),  # verifies signatures: runs gpg
    ("git log", "git log --show-signature"),
    ("git status", "git -c core.fsmonitor=sh status"),
    ("git status", "git -C memory status"),
    ("git status", "git status --ignore-submodules=none"),
    ("git diff", "git diff --submodule=diff"),
    ("git branch", "git branch evil"),  # creates a branch
    ("git branch", "git branch -D main"),
]


@pytest.mark.parametrize(("rule", "command"), ATTACKS)
def test_it_covers_none_of_the_attacks(rule, command):
    assert not covers(rule, command)
    assert rule_for(command).prefix is None


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_it_runs_nothing_unattended_that_the_rule_does_not_cover(alice, llm, configure):
    """The issue's attack through the real entry point: an untrusted scheduled
    task writes a script (no approval needed), then hides -exec from the rule."""
    configure("terminal", enabled=True)
    task = make_task(allow_terminal(alice))
    TerminalAllowedPrefix.objects.create(owner=alice, prefix="find")
    command = ATTACKS[0][1]
    llm.script(
        reply_with_tool("write_memory_file", {"path": "memory/p.md", "text": "touch ran\n"}),
        reply_with_tool("terminal", {"command": command}),
        Reply(text="Done."),
    )
    assert run_due_tasks(now=MONDAY_9).runs[0].status == "completed"
    workspace = workspace_dir(alice.pk, task.agent.name)
    assert (workspace / "memory" / "p.md").exists()
    assert not (workspace / "ran").exists()
    request = ApprovalRequest.objects.get(owner=alice)
    assert (request.command, request.status) == (command, ApprovalRequest.Status.PENDING)
