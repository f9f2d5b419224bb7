from __future__ import annotations

import os
import signal
import subprocess
from typing import Any

from django.conf import settings

from agent.approvals import is_allowed
from agent.tools import Tool, ToolContext, ToolError, register, terminal_enabled

# Commands see a minimal environment: never the app's secrets or service URLs.
SAFE_VARIABLES = ("PATH", "LANG", "LC_ALL", "TZ", "TERM")


def needs_approval(context: ToolContext, arguments: dict[str, Any]) -> str | None:
    command = arguments["command"]
    if context.trusted or is_allowed(context.owner, command):
        return None
    return command


def run_command(context: ToolContext, arguments: dict[str, Any]) -> str:
    options = settings.NEOTASK["terminal"]
    env = {name: os.environ[name] for name in SAFE_VARIABLES if name in os.environ}
    env["HOME"] = str(context.workspace)
    process = subprocess.Popen(
        ["/bin/sh", "-c", arguments["command"]],
        cwd=context.workspace,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # so a timeout can stop the whole process group
    )
    try:
        output, _ = process.communicate(timeout=options["timeout_seconds"])
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise ToolError(
            f"The command did not finish within {options['timeout_seconds']:g} s and was stopped."
        ) from None
    limit = options["output_limit_bytes"]
    text = output[:limit].decode("utf-8", errors="replace")
    if len(output) > limit:
        text += f"\n[output cut at {limit} bytes of {len(output)}]"
    return f"exit code {process.returncode}\n{text}"


register(
    Tool(
        name="terminal",
        description=(
            "Run a shell command in the agent's workspace directory. The user must approve "
            "each command unless they allowed its prefix always."
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
