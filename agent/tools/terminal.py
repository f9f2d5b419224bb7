from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings

from agent import rules, safe_git, sandbox
from agent.approvals import has_terminal_permission, is_allowed
from agent.tools.registry import Tool, ToolContext, ToolError, register, terminal_enabled


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
    options = settings.NEOTASK["terminal"]
    limits = sandbox.Limits.from_options(options)
    if options["sandbox"] == "none":
        return sandbox.run_unconfined(workspace, command, limits), limits
    return sandbox.run_sandboxed(workspace, command, limits, network=options["network"]), limits


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
    text = outcome.output.decode("utf-8", errors="replace")
    if outcome.timed_out:
        raise ToolError(
            f"The command did not finish within {limits.wall_seconds:g} s and was stopped."
            + (f" Its output so far:\n{text}" if text else "")
        )
    if outcome.output_cut:
        note = f"[output cut at {limits.output_bytes} bytes; the command was stopped]"
        return f"exit code: stopped\n{text}\n{note}"
    return f"exit code {outcome.exit_code}\n{text}"


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
        enabled=terminal_enabled,
    )
)
