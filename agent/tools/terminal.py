from __future__ import annotations

from typing import Any

from django.conf import settings

from agent import sandbox
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
    if context.trusted or is_allowed(context.owner, command):
        return None
    return command


def run_command(context: ToolContext, arguments: dict[str, Any]) -> str:
    options = settings.NEOTASK["terminal"]
    limits = sandbox.Limits.from_options(options)
    command = arguments["command"]
    try:
        if options["sandbox"] == "none":
            outcome = sandbox.run_unconfined(context.workspace, command, limits)
        else:
            outcome = sandbox.run_sandboxed(
                context.workspace, command, limits, network=options["network"]
            )
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
            "must approve each command unless they allowed it always."
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
