"""Which terminal commands a remembered "Allow always" rule may cover: an allow-list.

A command is covered only when the shell will run it exactly as written (one
simple command: no expansion, no operator, no redirection, no assignment) and
it is a program of TABLE given only the options TABLE lists for it, spelt in
full. Everything else, recognised or not, needs a click. The programs read and
print; none of them, with these options, runs another program or writes a file.

A rule is the program, plus the subcommand for git (`ls`, `git log`); a stored
rule may be longer (`git log --oneline`, from an import) and then covers the
commands that start with its words. Every use parses the stored rule and the
command again against this table: a rule the table does not allow covers
nothing, wherever it came from. No database here: the approvals, the models and
a migration use it, and agent.sandbox (no Django) through agent.safe_git.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable
from dataclasses import dataclass, field

# Outside quotes, the characters the shell takes literally; anything else may
# expand, chain, redirect or start a comment.
LITERAL = frozenset(string.ascii_letters + string.digits + "_./:=,+@%^-~")
# What double quotes do not make literal: `$`, backquotes, backslashes (and
# `!`, history expansion in an interactive bash).
EXPANDED_IN_DOUBLE_QUOTES = frozenset("$`\\!")
SHELL_SYNTAX = [
    (";&|\n\r", "it chains commands (; & | or a new line)"),
    ("<>", "it redirects input or output"),
    ("$", "the shell expands $ (variables, ${…}, $(…))"),
    ("`", "the shell runs what is between backquotes"),
    ("*?[]", "the shell expands * ? [ ] to file names"),
    ("{}", "the shell expands or groups what is between braces"),
    ("()", "parentheses run a subshell"),
    ("\\", "a backslash changes what the shell reads next"),
    ("#", "# starts a comment"),
    ("!", "! negates or expands"),
]
NUMBER = re.compile(r"-[0-9]+")


class NotCovered(ValueError):
    """No rule covers the command; the message says why, for the user."""


@dataclass(frozen=True)
class Arguments:
    """What a command's arguments were parsed into."""

    options: list[tuple[str, str | None]]  # name, value (None: a flag)
    positionals: list[str]

    def has(self, *names: str) -> bool:
        return any(name in names for name, _ in self.options)


@dataclass(frozen=True)
class Program:
    """A program (or a git subcommand) and exactly the options it may be given."""

    flags: frozenset[str] = frozenset()  # take no value: -l, --all
    valued: frozenset[str] = frozenset()  # -n 5, -n5, --lines=5, --lines 5
    optional: frozenset[str] = frozenset()  # a value attached or none: -U3, --color=never
    numbers: bool = False  # -5 (head, tail, grep, git log)
    bundles: bool = True  # -la for -l -a (git log/diff/show parse them one by one)
    max_positionals: int | None = None
    check: Callable[[Arguments], str | None] | None = None
    subcommands: dict[str, Program] = field(default_factory=dict)  # then flags come first


def program(
    flags: str = "",
    valued: str = "",
    optional: str = "",
    *,
    numbers: bool = False,
    bundles: bool = True,
    max_positionals: int | None = None,
    check: Callable[[Arguments], str | None] | None = None,
    subcommands: dict[str, Program] | None = None,
) -> Program:
    """A Program from its options written out as in the manual."""
    return Program(
        frozenset(flags.split()),
        frozenset(valued.split()),
        frozenset(optional.split()),
        numbers,
        bundles,
        max_positionals,
        check,
        subcommands or {},
    )


def date_check(arguments: Arguments) -> str | None:
    if any(not word.startswith("+") for word in arguments.positionals):
        return "date sets the clock when given a date that is not a +FORMAT"
    return None


def branch_check(arguments: Arguments) -> str | None:
    if arguments.positionals and not arguments.has("-l", "--list"):
        return "git branch creates a branch when given a name (list them with --list)"
    return None


def format_check(arguments: Arguments) -> str | None:
    for name, value in arguments.options:
        if name in ("--format", "--pretty") and value and "%G" in value:
            return "%G in a git format verifies signatures: it runs gpg"
    return None


# Read-only inspection. Each option is in here because it only changes what is
# read or printed; every long name is spelt in full, so that no GNU abbreviation
# (`--checkpoint-a` for `--checkpoint-action`) can stand for another option.
COLOR = "--color"
TABLE: dict[str, Program] = {
    "ls": program(
        "-a --all -A --almost-all -b --escape -B --ignore-backups -c -C -d --directory "
        "-f -F --classify -g -G --no-group -h --human-readable --si -i --inode -k "
        "--kibibytes -l -L --dereference -m -n --numeric-uid-gid -N --literal -o -p -q "
        "--hide-control-chars -Q --quote-name -r --reverse -R --recursive -s --size -S -t "
        "-u -U -v -x -X -1 --group-directories-first --full-time",
        valued="-w --width -I --ignore --hide --sort --time --time-style",
        optional=COLOR,
    ),
    "cat": program(
        "-A --show-all -b --number-nonblank -e -E --show-ends -n --number -s "
        "--squeeze-blank -t -T --show-tabs -u -v --show-nonprinting"
    ),
    "head": program(
        "-q --quiet --silent -v --verbose -z --zero-terminated",
        valued="-c --bytes -n --lines",
        numbers=True,
    ),
    "tail": program(
        "-q --quiet --silent -v --verbose -z --zero-terminated",
        valued="-c --bytes -n --lines",
        numbers=True,
    ),
    "wc": program("-c --bytes -m --chars -l --lines -L --max-line-length -w --words"),
    "grep": program(
        "-E --extended-regexp -F --fixed-strings -G --basic-regexp -P --perl-regexp "
        "-i --ignore-case --no-ignore-case -v --invert-match -w --word-regexp -x "
        "--line-regexp -c --count -L --files-without-match -l --files-with-matches -o "
        "--only-matching -q --quiet --silent -s --no-messages -b --byte-offset -H "
        "--with-filename -h --no-filename -n --line-number -T --initial-tab -Z --null "
        "-z --null-data -a --text -I -r --recursive -R --dereference-recursive "
        "--line-buffered -U --binary",
        valued="-e --regexp -f --file -m --max-count -A --after-context -B "
        "--before-context -C --context --label --binary-files -d --directories -D "
        "--devices --include --exclude --exclude-dir --exclude-from",
        optional=COLOR,
        numbers=True,
    ),
    "stat": program("-L --dereference -f --file-system -t --terse", valued="-c --format --printf"),
    "du": program(
        "-0 --null -a --all --apparent-size -b --bytes -c --total -D "
        "--dereference-args -h --human-readable --inodes -k -l --count-links -L "
        "--dereference -m -P --no-dereference -s --summarize -S --separate-dirs --si "
        "-x --one-file-system",
        valued="-d --max-depth -t --threshold --exclude -B --block-size",
    ),
    "df": program(
        "-a --all -h --human-readable -H --si -i --inodes -k -l --local -P "
        "--portability -T --print-type --total",
        valued="-t --type -x --exclude-type -B --block-size",
    ),
    "pwd": program("-L -P", max_positionals=0),
    "date": program(
        "-u --utc --universal -R --rfc-email",
        valued="-d --date -r --reference --rfc-3339",
        optional="-I --iso-8601",
        max_positionals=1,
        check=date_check,
    ),
    "echo": program("-n -e -E"),
    "sort": program(
        "-b --ignore-leading-blanks -d --dictionary-order -f --ignore-case -g "
        "--general-numeric-sort -i --ignore-nonprinting -M --month-sort -h "
        "--human-numeric-sort -n --numeric-sort -R --random-sort -r --reverse -V "
        "--version-sort -c -C -s --stable -u --unique -z --zero-terminated",
        valued="-k --key -t --field-separator",
    ),
    "uniq": program(
        "-c --count -d --repeated -D -i --ignore-case -u --unique -z --zero-terminated",
        valued="-f --skip-fields -s --skip-chars -w --check-chars",
        max_positionals=1,  # a second name is the file it writes
    ),
    "diff": program(
        "-q --brief -s --report-identical-files -c -u -e --ed -n --rcs -y --side-by-side "
        "--left-column --suppress-common-lines -p --show-c-function -t --expand-tabs -T "
        "--initial-tab --suppress-blank-empty -r --recursive -N --new-file "
        "--unidirectional-new-file -i --ignore-case -E --ignore-tab-expansion -Z "
        "--ignore-trailing-space -b --ignore-space-change -w --ignore-all-space -B "
        "--ignore-blank-lines --strip-trailing-cr -a --text -d --minimal --normal",
        valued="-C -U -W --width -x --exclude -X --exclude-from -I "
        "--ignore-matching-lines --label --tabsize",
        optional=f"--context --unified {COLOR}",
    ),
    "git": program(
        "--no-pager",
        subcommands={
            "status": program(
                "-s --short -b --branch --show-stash --long -z --null --ahead-behind "
                "--no-ahead-behind --renames --no-renames",
                optional="--porcelain -u --untracked-files --ignored",
            ),
            "log": program(
                "--oneline --graph --no-decorate --all -p -u --patch -s --no-patch "
                "--shortstat --numstat --name-only --name-status --summary --no-merges "
                "--merges --first-parent --reverse --abbrev-commit --no-abbrev-commit "
                "--follow -i --regexp-ignore-case --all-match --invert-grep -E "
                "--extended-regexp -F --fixed-strings --topo-order --date-order "
                "--author-date-order --left-right --no-color --no-renames --relative-date "
                "--parents --children --source -w --ignore-all-space -b "
                "--ignore-space-change",
                valued="-n --max-count --skip --since --after --until --before --author "
                "--committer --grep --format --date -S -G",
                optional=f"--decorate --stat --pretty -U --unified {COLOR}",
                numbers=True,
                bundles=False,
                check=format_check,
            ),
            "diff": program(
                "--cached --staged -p -u --patch -s --no-patch --raw --shortstat "
                "--numstat --name-only --name-status --summary --no-color -w "
                "--ignore-all-space -b --ignore-space-change --ignore-blank-lines "
                "--ignore-space-at-eol -R --no-renames --exit-code --quiet --check "
                "--minimal --patience --histogram -a --text --merge-base -z",
                valued="--diff-filter",
                optional=f"--stat -U --unified --word-diff {COLOR}",
                bundles=False,
            ),
            "show": program(
                "--oneline --no-decorate -p -u --patch -s --no-patch --raw --shortstat "
                "--numstat --name-only --name-status --summary --abbrev-commit "
                "--no-abbrev-commit --no-color -w --ignore-all-space -b "
                "--ignore-space-change --no-renames --quiet",
                valued="--format --date",
                optional=f"--decorate --stat --pretty -U --unified --word-diff {COLOR}",
                bundles=False,
                check=format_check,
            ),
            "branch": program(
                "-a --all -r --remotes -v --verbose -l --list --show-current "
                "--no-color -i --ignore-case",
                optional=COLOR,
                check=branch_check,
            ),
        },
    ),
}

# The table as a user reads it: "ls, cat, …, git status/log/diff/show/branch".
PROGRAMS = ", ".join(
    f"{name} {'/'.join(spec.subcommands)}" if spec.subcommands else name
    for name, spec in TABLE.items()
)
# Why programs people often ask for are not in TABLE: the message only, for
# anything not in TABLE is refused whatever this says.
REASONS = {
    **dict.fromkeys(
        ("sh", "bash", "dash", "zsh", "rbash", "python", "python3", "perl", "ruby", "node"),
        "{} is an interpreter: it runs whatever code it is given",
    ),
    **dict.fromkeys(
        ("env", "xargs", "sudo", "nohup", "nice", "timeout", "watch", "taskset", "chrt"),
        "{} runs the program named in its arguments",
    ),
    **dict.fromkeys(("setarch", "linux64", "ssh-agent", "strace", "time"), "{} runs a program"),
    "find": "find can run programs (-exec, -execdir, -ok) and delete files",
    "tar": "tar can run programs (--to-command, --checkpoint-action, -I) and writes files",
    "split": "split can run a program (--filter) and writes files",
    "make": "make runs the commands of a Makefile, a file in the workspace",
    **dict.fromkeys(("sed", "awk", "vi", "vim", "view", "sqlite3"), "{} can run commands"),
    **dict.fromkeys(("npm", "npx", "pip", "uv", "cargo", "go"), "{} runs code of the project"),
    **dict.fromkeys(("cp", "mv", "rm", "mkdir", "touch", "tee", "ln", "chmod"), "{} changes files"),
}


@dataclass(frozen=True)
class Command:
    """A covered command: its rule and its words, git's leading options left out."""

    rule: str  # "ls", "git log"
    words: tuple[str, ...]  # ("git", "log", "-5") for `git --no-pager log -5`


@dataclass(frozen=True)
class Rule:
    """What "Allow always" stores for a command; prefix None: not offered, and why."""

    prefix: str | None
    reason: str = ""


def words_of(command: str) -> list[str]:
    """The words as the shell will pass them, or NotCovered when the shell would
    do more than split at blanks and remove quotes."""
    words: list[str] = []
    word: list[str] | None = None
    at = 0
    while at < len(command):
        char = command[at]
        if char in " \t":
            if word is not None:
                words.append("".join(word))
            word = None
            at += 1
            continue
        start = word is None
        word = word if word is not None else []
        if char in "'\"":
            end = command.find(char, at + 1)
            if end < 0:
                raise NotCovered("it has a quote that is not closed")
            quoted = command[at + 1 : end]
            if not quoted.isprintable():
                raise NotCovered("it holds a control character")
            if char == '"' and EXPANDED_IN_DOUBLE_QUOTES.intersection(quoted):
                raise NotCovered("the shell expands $, ` and \\ inside double quotes")
            word.append(quoted)
            at = end + 1
            continue
        if char == "~" and (start or command[at - 1] in "=:"):
            raise NotCovered("the shell expands ~ to a home directory")
        if char == "=" and start:
            raise NotCovered("some shells expand a word starting with = to a program's path")
        if char not in LITERAL:
            raise NotCovered(syntax_reason(char))
        word.append(char)
        at += 1
    if word is not None:
        words.append("".join(word))
    if not words:
        raise NotCovered("it is empty")
    return words


def syntax_reason(char: str) -> str:
    for chars, reason in SHELL_SYNTAX:
        if char in chars:
            return reason
    if not char.isprintable():
        return "it holds a control character"
    return f"it holds {char!r} outside quotes"


def parse_arguments(name: str, spec: Program, words: list[str]) -> Arguments:
    """Parse words as GNU getopt would, against exactly spec's options."""
    options: list[tuple[str, str | None]] = []
    positionals: list[str] = []
    rest = iter(words)

    def value_after(option: str) -> str:
        value = next(rest, None)
        if value is None:
            raise NotCovered(f"{name} {option} needs a value")
        if value.startswith("-"):  # as a value or as an option: refuse both readings
            raise NotCovered(f"the value of {name} {option} starts with -")
        return value

    for word in rest:
        if word == "--":
            positionals += rest
            break
        if word == "-":
            raise NotCovered(f"{name} - reads standard input")
        if not word.startswith("-"):
            positionals.append(word)
            continue
        if word.startswith("--"):
            option, equals, value = word.partition("=")
            if option in spec.flags and not equals:
                options.append((option, None))
            elif option in spec.optional:
                options.append((option, value if equals else None))
            elif option in spec.valued:
                options.append((option, value if equals else value_after(option)))
            else:
                raise NotCovered(f"{name} {option} is not an option a rule may cover")
            continue
        if spec.numbers and NUMBER.fullmatch(word):
            options.append((word, None))
            continue
        letters = word[1:]
        while letters:
            option, letters = f"-{letters[0]}", letters[1:]
            if option in spec.optional:
                options.append((option, letters or None))
                break
            if option in spec.valued:
                options.append((option, letters or value_after(option)))
                break
            if option not in spec.flags:
                raise NotCovered(f"{name} {option} is not an option a rule may cover")
            if letters and not spec.bundles:
                raise NotCovered(f"{name} reads {word} as one option: write them apart")
            options.append((option, None))
    arguments = Arguments(options, positionals)
    if spec.max_positionals is not None and len(positionals) > spec.max_positionals:
        raise NotCovered(f"{name} takes at most {spec.max_positionals} file name(s) here")
    if spec.check and (reason := spec.check(arguments)):
        raise NotCovered(reason)
    return arguments


def parse(command: str) -> Command:
    """The command as a rule sees it, or NotCovered with the reason."""
    words = words_of(command)
    name = words[0]
    if "=" in name:
        raise NotCovered("it sets environment variables for the program it runs")
    if "/" in name:
        raise NotCovered("it names its program by a path, and the file there can change")
    spec = TABLE.get(name)
    if spec is None:
        if name in REASONS:
            raise NotCovered(REASONS[name].format(name))
        raise NotCovered(f"{name} is not one of the programs a rule may cover ({PROGRAMS})")
    if not spec.subcommands:
        parse_arguments(name, spec, words[1:])
        return Command(name, tuple(words))
    at = 1
    while at < len(words) and words[at] in spec.flags:
        at += 1
    known = ", ".join(spec.subcommands)
    if at == len(words):
        raise NotCovered(f"{name} needs one of its subcommands a rule may cover ({known})")
    subcommand = words[at]
    if subcommand not in spec.subcommands:
        if subcommand.startswith("-"):
            raise NotCovered(f"{name} {subcommand} before the subcommand changes what runs")
        raise NotCovered(f"{name} {subcommand} is not a subcommand a rule may cover ({known})")
    parse_arguments(f"{name} {subcommand}", spec.subcommands[subcommand], words[at + 1 :])
    return Command(f"{name} {subcommand}", (name, *words[at:]))


def rule_problem(prefix: str) -> str | None:
    """Why the table does not allow this stored rule, or None."""
    try:
        parse(prefix)
    except NotCovered as exc:
        return str(exc)
    return None


def rule_for(command: str) -> Rule:
    """The rule "Allow always" would store: the program, plus git's subcommand."""
    try:
        return Rule(parse(command).rule)
    except NotCovered as exc:
        return Rule(None, f"“Allow always” is not offered: {exc}.")


def covers(prefix: str, command: str) -> bool:
    """Whether a stored rule covers the command: both parse against the table
    now, and the command's words start with the rule's."""
    try:
        rule, wanted = parse(prefix), parse(command)
    except NotCovered:
        return False
    return wanted.words[: len(rule.words)] == rule.words
