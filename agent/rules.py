"""Which terminal commands a remembered "Allow always" rule may cover.

A rule is a program, plus its subcommand for tools that have them. A rule
never covers what can run other programs: interpreters, shells, runners, and
the options of ordinary tools that execute commands (`find -exec`, `git -c`).
Those are refused again at every use, so an old or imported rule cannot reach
them either. No database here: the approvals and the models both use it.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

# Anything that chains, substitutes or redirects: a prefix approved for `ls`
# must never let `ls; rm -rf ~` or `ls $(rm -rf ~)` through.
CONTROL_OPERATORS = re.compile(r"[;&|`<>\n\r]|\$\(")
SUBCOMMAND = re.compile(r"^[a-z][a-z0-9_-]*$")
PROGRAM = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")
# Programs whose second word picks what they do: allowing `git status` must
# not allow `git push`.
WITH_SUBCOMMANDS = frozenset(
    {
        *("apt", "apt-get", "brew", "cargo", "docker", "gh", "git", "go", "helm", "kubectl"),
        *("make", "npm", "pip", "pip3", "pnpm", "poetry", "systemctl", "uv", "yarn"),
    }
)
# Programs that run code or other programs given in their arguments (or read
# from a file the agent can write): approving one use approves anything.
INTERPRETERS = re.compile(
    r"^(?:(?:i?python|pypy|perl|ruby|php|lua|luajit|tclsh|wish|node|nodejs|java|jshell)"
    r"[0-9.]*|(?:ba|da|a|k|mk|z|c|tc)?sh|fish|busybox|toybox)$"
)
RUNNERS = frozenset(
    {
        # Shell words that run their arguments.
        *(".", "source", "exec", "eval", "command", "builtin", "trap", "alias"),
        # Run a program given as an argument.
        *("env", "xargs", "sudo", "su", "doas", "runuser", "pkexec", "setpriv", "chroot"),
        *("nohup", "nice", "ionice", "timeout", "time", "stdbuf", "setsid", "flock"),
        *("watch", "parallel", "script", "unbuffer", "strace", "ltrace", "gdb", "valgrind"),
        *("unshare", "nsenter", "capsh", "prlimit", "bwrap", "firejail", "systemd-run", "at"),
        *("batch", "crontab", "ssh", "npx", "uvx", "pipx", "bunx", "deno", "bun"),
        # Languages whose programs are usually given inline.
        *("awk", "gawk", "mawk", "nawk", "sed", "Rscript", "R", "julia", "expect"),
        *("ed", "ex", "vi", "vim", "nvim", "emacs"),
    }
)
# Subcommands that run programs (scripts, a package's binaries, a hook).
RUNNING_SUBCOMMANDS = {
    "npm": {"run", "run-script", "exec", "x", "start", "test", "restart", "stop", "explore"},
    "pnpm": {"run", "exec", "dlx", "start", "test"},
    "yarn": {"run", "exec", "dlx", "start", "test", "node"},
    "uv": {"run", "tool"},
    "poetry": {"run", "shell"},
    "cargo": {"run"},
    "go": {"run", "generate"},
    "docker": {"run", "exec", "compose", "buildx"},
    "kubectl": {"exec", "run", "debug", "attach"},
    "git": {
        *("config", "submodule", "bisect", "difftool", "mergetool", "rebase", "filter-branch"),
        *("daemon", "instaweb", "send-email", "credential", "shell", "upload-pack"),
        *("receive-pack", "archimport", "cvsimport", "svn", "p4", "web--browse"),
    },
}
# Options that make an ordinary tool execute or load a program. Long options
# match with or without "=value"; short ones also inside a bundle (`-xIcmd`).
RUNNING_OPTIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "find": (("-exec", "-execdir", "-ok", "-okdir", "-delete"), ""),
    "git": (
        ("--upload-pack", "--receive-pack", "--exec", "--extcmd", "--config", "--config-env"),
        "",
    ),
    "make": (("--file", "--makefile", "--directory", "--eval", "--include-dir"), "fCEI"),
    "tar": (
        (
            *("--to-command", "--use-compress-program", "--checkpoint-action"),
            *("--info-script", "--new-volume-script", "--rsh-command", "--rmt-command"),
        ),
        "IF",
    ),
    "rsync": (("--rsh", "--rsync-path"), "e"),
    "scp": ((), "S"),
    "zip": (("--unzip-command",), "T"),
    "man": (("--pager", "--html"), "PH"),
    "sort": (("--compress-program",), ""),
    "split": (("--filter",), ""),
}


@dataclass(frozen=True)
class Rule:
    """What "Allow always" stores for a command; prefix None: not offered, and why."""

    prefix: str | None
    reason: str = ""


def normalize(command: str) -> str:
    return " ".join(command.split())


def has_control_operators(command: str) -> bool:
    return bool(CONTROL_OPERATORS.search(command))


def command_prefix(command: str) -> str:
    """The program, plus its subcommand for tools that have them: what groups
    commands (macros), whether or not a rule may remember it."""
    words = normalize(command).split(" ")
    if len(words) > 1 and words[0] in WITH_SUBCOMMANDS and SUBCOMMAND.match(words[1]):
        return " ".join(words[:2])
    return words[0]


def words_of(command: str) -> list[str] | None:
    """The words as the shell will see them (quotes and escapes removed), or
    None when the command does not parse."""
    try:
        return shlex.split(command)
    except ValueError:
        return None


def runs_other_programs(words: list[str]) -> str | None:
    """Why these words can run an arbitrary program, or None."""
    program = words[0]
    if "=" in program:
        return "it sets environment variables for the program it runs"
    if not PROGRAM.match(program):
        return "it names its program by a path, and the file there can change"
    if INTERPRETERS.match(program):
        return f"{program} is an interpreter: it runs whatever code it is given"
    if program in RUNNERS:
        return f"{program} runs other programs or code given in its arguments"
    running = RUNNING_SUBCOMMANDS.get(program, set())
    if len(words) > 1 and words[1] in running:
        return f"{program} {words[1]} runs other programs"
    if program == "git" and len(words) > 1 and words[1].startswith("-"):
        return "git options before the subcommand (-c, -C, --exec-path, …) change what runs"
    if program == "make" and any("=" in w and not w.startswith("-") for w in words[1:]):
        return "make variables given on the command line can replace the commands it runs"
    long_options, short_letters = RUNNING_OPTIONS.get(program, ((), ""))
    for position, word in enumerate(words[1:], start=1):
        name = word.split("=", 1)[0]
        if name in long_options:
            return f"{program} {name} runs or loads other programs"
        if word.startswith("-") and not word.startswith("--"):
            bundle = word[1:]
        elif program == "tar" and position == 1:
            bundle = word  # tar's old style: the first word bundles options (`tar xIf …`)
        else:
            continue
        if any(letter in short_letters for letter in bundle):
            return f"{program} {word} runs or loads other programs"
    return None


def refusal(command: str) -> str | None:
    """Why no remembered rule may ever cover this command, or None."""
    if has_control_operators(command):
        return "it chains, substitutes or redirects commands"
    words = words_of(command)
    if not words:
        return "it does not parse as a simple command"
    return runs_other_programs(words)


def rule_for(command: str) -> Rule:
    """The rule "Allow always" would store: the program, plus its subcommand
    for tools that have them (`git status`, `npm ci`), never paths, options or values."""
    if reason := refusal(command):
        return Rule(None, f"“Allow always” is not offered: {reason}.")
    words = words_of(command) or []
    if words[0] in WITH_SUBCOMMANDS:
        if len(words) < 2 or not SUBCOMMAND.match(words[1]):
            return Rule(None, f"“Allow always” needs a {words[0]} subcommand to remember.")
        return Rule(" ".join(words[:2]))
    return Rule(words[0])


def covers(prefix: str, command: str) -> bool:
    """Whether a stored rule covers the command; the rule itself is checked
    again, so one stored before these rules (or imported) covers nothing unsafe."""
    if rule_for(prefix).prefix != prefix or refusal(command):
        return False
    words = words_of(command) or []
    wanted = prefix.split(" ")
    return words[: len(wanted)] == wanted
