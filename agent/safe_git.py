"""How git runs in the terminal, so that a repository in the workspace cannot
turn a read (`git status`, `git log -p`) into running a program.

A repository's own config (.git/config, which any command in the sandbox may
have written) and .gitattributes can name programs git runs while reading:
core.fsmonitor, hooks, pagers, external diff and textconv drivers, clean and
process filters, gpg for signatures, a lazy fetch's transport. Three layers:

- GIT_SAFE_ENV, for every command in the sandbox: no system or global config
  (`$HOME` is the workspace, so ~/.gitconfig is the agent's), and settings given
  on the command line's level, which outranks the repository's, that switch off
  fsmonitor, hooks and pagers;
- `hardened`: a covered read gets `--no-ext-diff --no-textconv
  --ignore-submodules`, so no diff driver runs and no submodule's own config is read;
- `config_problem`: a rule covers a git command only while the repository's
  config holds nothing but REPOSITORY_KEYS. Filters and drivers are defined
  under any name, and nothing on the command line switches filters off, so a
  repository that defines one, or anything unknown, gets the approval card.

No Django here: agent.sandbox imports GIT_SAFE_ENV.
"""

from __future__ import annotations

import re
import shlex

from agent.rules import NotCovered, parse, words_of

SETTINGS = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    ("core.attributesFile", "/dev/null"),
    # The workspace's owner inside the sandbox is whoever the mapping says.
    ("safe.directory", "*"),
)
GIT_SAFE_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_PAGER": "cat",
    "PAGER": "cat",
    "GIT_CONFIG_COUNT": str(len(SETTINGS)),
    **{f"GIT_CONFIG_KEY_{n}": key for n, (key, _) in enumerate(SETTINGS)},
    **{f"GIT_CONFIG_VALUE_{n}": value for n, (_, value) in enumerate(SETTINGS)},
}
HARDENING = {
    "git status": ("--ignore-submodules",),
    **dict.fromkeys(
        ("git diff", "git log", "git show"),
        ("--no-ext-diff", "--no-textconv", "--ignore-submodules"),
    ),
}
# What `git init` and `git clone` write, and a few settings of who and where:
# none names a program or a file git would read as config. Keys as git lists
# them: section and name in lower case, a subsection as written.
REPOSITORY_KEYS = re.compile(
    r"core\.(repositoryformatversion|filemode|bare|logallrefupdates|ignorecase"
    r"|precomposeunicode|symlinks|autocrlf|eol|safecrlf)"
    r"|extensions\.objectformat"
    r"|remote\.[^\n]+\.(url|pushurl|fetch)"
    r"|branch\.[^\n]+\.(remote|merge|rebase)"
    r"|submodule\.[^\n]+\.(url|active)"
    r"|user\.(name|email)|init\.defaultbranch|pull\.(rebase|ff)|push\.default|color\.ui"
)
# Run in the sandbox, with GIT_SAFE_ENV: reading config runs nothing.
LIST_CONFIG = "git config --null --list --show-scope --includes"


def needs_config_check(command: str) -> bool:
    try:
        return parse(command).rule.startswith("git ")
    except NotCovered:
        return False


def config_problem(exit_code: int | None, listing: bytes) -> str | None:
    """What in LIST_CONFIG's output (entries of scope NUL key LF value NUL) a
    rule must not trust, or None."""
    if exit_code != 0:
        return "git could not list the repository's config"
    fields = listing.decode("utf-8", errors="replace").split("\0")
    for scope, entry in zip(fields[::2], fields[1::2], strict=False):
        key = entry.split("\n", 1)[0]
        if scope != "command" and not REPOSITORY_KEYS.fullmatch(key):
            return (
                f"the repository's git config sets {key} ({scope}), which a rule does not "
                "cover: settings like it make git run programs"
            )
    return None


def hardened(command: str) -> str:
    """The command as it runs: a git read gets the options that keep drivers and
    submodules out; anything else runs as written."""
    try:
        rule = parse(command).rule
    except NotCovered:
        return command
    extra = HARDENING.get(rule)
    if extra is None:
        return command
    words = words_of(command)
    at = words.index(rule.split(" ")[1])  # the subcommand, after git's own options
    return shlex.join([*words[: at + 1], *extra, *words[at + 1 :]])
