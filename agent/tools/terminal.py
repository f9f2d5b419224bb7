from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from django.conf import settings

from agent import rules, safe_git, sandbox
from agent.approvals import has_terminal_permission, is_allowed
from agent.tools.registry import Tool, ToolContext, ToolError, register, terminal_enabled
from memory.files import quota
from memory.files.indexing import index_workspace
from monitoring import counters

log = logging.getLogger(__name__)

# A full workspace still lets a command write this much to one file (git's index,
# a lock file): what grows the workspace further stops it at the next look.
MIN_FILE_BYTES = 1024 * 1024


def needs_approval(context: ToolContext, arguments: dict[str, Any]) -> str | None:
    # Checked at every use, trusted tasks included: revoking the permission
    # stops the terminal at once, not at the next approval.
    if not has_terminal_permission(context.owner):
        raise ToolError(
            "Running terminal commands needs the permission “Can approve terminal commands”, "
            "which this user does not have."
        )
    command = arguments["command"]
    if context.trusted:
        return None
    if is_allowed(context.owner, command) and not repository_problem(context.workspace, command):
        return None
    return command


def execute(workspace: Path, command: str) -> tuple[sandbox.Outcome, sandbox.Limits]:
    """Run the command; stop it if it grows a workspace past its limit (quota).
    No single file may take more than the room left (RLIMIT_FSIZE); a command
    may still shrink a full workspace (rm) and run on meanwhile."""
    options = settings.NEOTASK["terminal"]
    limits = sandbox.Limits.from_options(options)
    stop_when = quota.WorkspaceWatch(workspace)
    room = max(quota.limit_bytes() - stop_when.before, MIN_FILE_BYTES)
    limits = replace(limits, file_size_bytes=min(limits.file_size_bytes, room))
    try:
        if options["sandbox"] == "none":
            outcome = sandbox.run_unconfined(workspace, command, limits, stop_when)
        else:
            network = options["network"]
            outcome = sandbox.run_sandboxed(workspace, command, limits, network, stop_when)
    except sandbox.SandboxError:
        counters.count_sandbox_run("unavailable")
        raise
    counters.count_sandbox_run(outcome.ending)
    return outcome, limits


def repository_problem(workspace: Path, command: str) -> str | None:
    """For a git command a rule covers: what in the repository's config the
    rule must not trust (agent.safe_git), read in the sandbox as git reads it."""
    if not safe_git.needs_config_check(command):
        return None
    try:
        outcome, _ = execute(workspace, safe_git.LIST_CONFIG)
    except sandbox.SandboxError as exc:
        return str(exc)
    if outcome.output_cut:
        return "the repository's git config is longer than the output limit"
    return safe_git.config_problem(outcome.exit_code, outcome.output)


def run_command(context: ToolContext, arguments: dict[str, Any]) -> str:
    try:
        outcome, limits = execute(context.workspace, safe_git.hardened(arguments["command"]))
    except sandbox.SandboxError as exc:
        raise ToolError(str(exc)) from None
    reindex(context)
    text = outcome.output.decode("utf-8", errors="replace")
    if outcome.stopped_because:
        raise ToolError(
            f"The command was stopped: {outcome.stopped_because} What it wrote is kept."
            + (f" Its output so far:\n{text}" if text else "")
        )
    if outcome.timed_out:
        raise ToolError(
            f"The command did not finish within {limits.wall_seconds:g} s and was stopped."
            + (f" Its output so far:\n{text}" if text else "")
        )
    if outcome.output_cut:
        note = f"[output cut at {limits.output_bytes} bytes; the command was stopped]"
        return f"exit code: stopped\n{text}\n{note}{full_note(context.workspace)}"
    return f"exit code {outcome.exit_code}\n{text}{full_note(context.workspace)}"


def reindex(context: ToolContext) -> None:
    """A command may have changed memory files: a write path indexes what it changed
    (a stat per file when nothing did), so that the next search finds it."""
    try:
        index_workspace(context.owner, context.agent_name)
    except Exception:  # the command ran; its answer matters more than the index
        log.exception("indexing the workspace of user %s after a command", context.owner.pk)


def full_note(workspace: Path) -> str:
    """Said after a command that left the workspace past its limit."""
    used = quota.used_bytes(workspace)
    return f"\n[{quota.full_message(used)}]" if used > quota.limit_bytes() else ""


register(
    Tool(
        name="terminal",
        description=(
            "Run a shell command (/bin/sh) in the agent's workspace, which is the current "
            "directory and $HOME, in a sandbox that sees nothing else of the server. The user "
            "must approve each command unless they allowed it always, which covers only "
            f"single read-only commands ({rules.PROGRAMS}) with no $, backquotes, globs, "
            "pipes, ; or redirections."
        ),
        parameters={
            "type": "object",
            "properties": {"command": {"type": "string", "maxLength": 2000}},
            "required": ["command"],
        },
        run=run_command,
        approval_subject=needs_approval,
        confirm=lambda calls: "Ran " + ", ".join(f"`{c.arguments['command']}`" for c in calls),
        enabled=terminal_enabled,
    )
)
