""" "Allow always" as an allow-list: each attack of issue 24 (finding 2), with the
rule the attacker had stored, comes out "not covered"; and no command built from
the table's own grammar is covered once the shell would expand or chain anything.
"""

from __future__ import annotations

import gzip
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.models import ApprovalRequest, TerminalAllowedPrefix
from agent.rules import LITERAL, TABLE, Program, covers, rule_for, words_of
from memory.workspace import workspace_dir
from scheduler.due_tasks import run_due_tasks
from tests.support.records import MONDAY_9, allow_terminal, make_task
from tests.support.scripted_llm import Reply, reply_with_tool

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


# The table's own grammar, drawn at random ------------------------------------------

VALUE = st.text("abcxyz0123456789./:,+@%^_", min_size=1, max_size=8)
PATH = st.text("abcxyz0123456789._/", min_size=1, max_size=10)


def quoted(word: str) -> st.SearchStrategy[str]:
    """The word as the shell reads it: bare when it can be, or in either quotes."""
    forms = [f"'{word}'"]
    if not set(word) & set('$`\\!"'):
        forms.append(f'"{word}"')
    if word and set(word) <= LITERAL and not word.startswith("~") and "=~" not in word:
        forms.append(word)
    return st.sampled_from(forms)


@st.composite
def arguments(draw: st.DrawFn, spec: Program) -> list[str]:
    words: list[str] = []
    for _ in range(draw(st.integers(0, 4))):
        kinds = [k for k in ("flags", "valued", "optional") if getattr(spec, k)]
        kind = draw(st.sampled_from(kinds))
        option = draw(st.sampled_from(sorted(getattr(spec, kind))))
        value = draw(VALUE)
        long = option.startswith("--")
        if kind == "flags":
            words.append(option)
        elif kind == "optional":
            words.append(
                draw(st.sampled_from([option, f"{option}={value}" if long else option + value]))
            )
        else:
            attached = f"{option}={value}" if long else option + value
            words += draw(st.sampled_from([[attached], [option, value]]))
    if spec.max_positionals != 0 and spec.check is None:
        words += draw(st.lists(PATH, max_size=3))[: spec.max_positionals]
    if spec.max_positionals is None and spec.check is None and draw(st.booleans()):
        words += ["--", *draw(st.lists(st.text("-abc./", min_size=1, max_size=6), max_size=2))]
    return words


@st.composite
def table_commands(draw: st.DrawFn) -> tuple[str, list[str]]:
    """A command the table covers: its rule, and its words."""
    name = draw(st.sampled_from(sorted(TABLE)))
    spec, words = TABLE[name], [name]
    if spec.subcommands:
        subcommand = draw(st.sampled_from(sorted(spec.subcommands)))
        spec, words = spec.subcommands[subcommand], [name, subcommand]
    return " ".join(words), [*words, *draw(arguments(spec))]


@st.composite
def rendered(draw: st.DrawFn) -> tuple[str, list[str], str]:
    rule, words = draw(table_commands())
    return rule, words, " ".join(draw(quoted(word)) for word in words)


# What the shell expands, runs, chains or redirects, written unquoted.
INJECTED = [
    "$x", "${x}", "${U:--exec}", "$(id)", "`id`", '"$x"', '"`id`"', '"\\x"', "*", "?", "[a]",
    "{a,b}", "{}", ";id", "|id", "&", "&&id", ">x", "<x", "(id)", "\n", "#x", "\\x", "!x",
    "'open",
]  # fmt: skip


@given(command=rendered())
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_it_covers_what_the_table_grammar_builds(command):
    rule, words, text = command
    assert words_of(text) == words
    assert rule_for(text).prefix == rule
    assert covers(rule, text)


@given(
    command=rendered(),
    injected=st.sampled_from([*INJECTED, "~", "~/x", "a=~"]),
    where=st.sampled_from(["word", "prefix", "suffix"]),
    at=st.integers(0, 20),
)
@settings(max_examples=1000, suppress_health_check=[HealthCheck.too_slow])
def test_it_covers_nothing_the_shell_would_expand(command, injected, where, at):
    rule, _, text = command
    parts = text.split(" ")
    at = min(at, len(parts))
    if where == "word" or injected.startswith("~") or injected == "a=~":
        parts.insert(at, injected)
    elif where == "prefix" and at < len(parts):
        parts[at] = injected + parts[at]
    else:
        parts[min(at, len(parts) - 1)] += injected
    attacked = " ".join(parts)
    assert not covers(rule, attacked)
    assert rule_for(attacked).prefix is None


@pytest.mark.slow
@pytest.mark.parametrize("shell", ["/bin/sh", "/bin/bash"])
@given(command=rendered())
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_it_reads_the_words_as_the_shell_does(shell, command):
    _, words, text = command
    printed = subprocess.run(
        [shell, "-c", f"printf '%s\\0' {text}"], capture_output=True, check=True, env={}
    ).stdout
    assert printed.split(b"\0")[:-1] == [word.encode() for word in words]


# Every option of the table exists under exactly that name ---------------------------


def documentation(name: str) -> str:
    """What the program says of its options: its --help; for git, its manuals
    (`git show` takes `git log`'s options) and what it offers for completion."""
    if not name.startswith("git "):
        program = shutil.which(name, path="/usr/bin:/bin")
        assert program is not None
        return subprocess.run([program, "--help"], capture_output=True, text=True).stdout
    subcommand = name.split()[1]
    pages = [Path(f"/usr/share/man/man1/git-{page}.1.gz") for page in (subcommand, "log")]
    if not pages[0].exists():
        pytest.skip(f"{pages[0]} is not installed")
    helper = ["git", subcommand, "--git-completion-helper"]
    text = subprocess.run(helper, capture_output=True, text=True).stdout
    return text + "".join(gzip.decompress(p.read_bytes()).decode() for p in pages).replace(
        "\\-", "-"
    )


def each_program() -> list[tuple[str, Program]]:
    found = []
    for name, spec in TABLE.items():
        found += [(f"{name} {sub}", each) for sub, each in spec.subcommands.items()]
        found.append((name, spec))
    return found


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "spec"), each_program(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_it_names_only_options_the_program_documents(name, spec):
    """An option listed by a name the program does not have would be read by it
    as an abbreviation of another one."""
    text = documentation(name)
    for option in sorted(spec.flags | spec.valued | spec.optional):
        if not option.startswith("--") or name == "echo":
            continue
        assert re.search(re.escape(option) + r"(?![\w-])", text), f"{name} {option}"
