"""The agent's scheduling tools. Registered from SchedulerConfig.ready(), so that
`agent` never imports `scheduler` (dependencies point from scheduler to agent)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from agent.tools.registry import Tool, ToolContext, ToolError, register
from core.history import Actor
from scheduler.models import ScheduledTask
from scheduler.planning import MAX_NAME_CHARS, MAX_PROMPT_CHARS, Plan, TaskError
from sessions_app.models import Agent

MAX_LISTED = 50


def when(moment: datetime | None, zone: str) -> str:
    if moment is None:
        return "never"
    return moment.astimezone(ZoneInfo(zone)).strftime("%a %Y-%m-%d %H:%M %Z")


def describe_plan(planned: Plan) -> str:
    kind = "one-time" if planned.is_oneshot else "recurring"
    runs = ", ".join(when(run, planned.time_zone) for run in planned.runs)
    label = "Runs at" if planned.is_oneshot else "Next runs"
    return f"cron `{planned.cron_expr}` ({kind}, {planned.time_zone}). {label}: {runs}."


def schedule_task(context: ToolContext, arguments: dict[str, Any]) -> str:
    agent = Agent.objects.owned_by(context.owner).filter(name=context.agent_name).first()
    try:
        task, planned = ScheduledTask.objects.create_task(
            context.owner,
            arguments["schedule"],
            arguments["prompt"],
            arguments.get("name", ""),
            actor=context.actor,
            agent=agent,
        )
    except TaskError as exc:
        raise ToolError(str(exc)) from None
    return f'Scheduled "{task.name}" (id {task.pk}): {describe_plan(planned)}'


def list_tasks(context: ToolContext, arguments: dict[str, Any]) -> str:
    tasks = list(ScheduledTask.objects.owned_by(context.owner).order_by("next_run_at")[:MAX_LISTED])
    if not tasks:
        return "There are no scheduled tasks."
    return "\n".join(describe_task(task) for task in tasks)


def describe_task(task: ScheduledTask) -> str:
    state = "paused" if task.is_paused else f"next run {when(task.next_run_at, task.time_zone)}"
    flags = [
        "one-time" if task.is_oneshot else "recurring",
        "from config.toml, read-only" if task.source == ScheduledTask.Source.CONFIG else "",
        "trusted" if task.is_trusted else "",
    ]
    return (
        f'- "{task.name}" (id {task.pk}): "{task.original_schedule}" = `{task.cron_expr}`; '
        f"{state}; last run {when(task.last_run_at, task.time_zone)}; "
        f"{', '.join(flag for flag in flags if flag)}. Prompt: {task.prompt[:200]}"
    )


def change(
    verb: str, apply: Callable[[ScheduledTask, Actor], None]
) -> Callable[[ToolContext, dict[str, Any]], str]:
    def run(context: ToolContext, arguments: dict[str, Any]) -> str:
        try:
            task = ScheduledTask.objects.owned_by(context.owner).find(arguments["task"])
            done = f'{verb} "{task.name}" (id {task.pk}).'  # before a delete clears the id
            apply(task, context.actor)
        except TaskError as exc:
            raise ToolError(str(exc)) from None
        return done

    return run


TASK_REFERENCE = {
    "type": "object",
    "properties": {
        "task": {"type": "string", "maxLength": 200, "description": "The task's id or exact name."}
    },
    "required": ["task"],
}

for tool in [
    Tool(
        name="schedule_task",
        description=(
            "Schedule a prompt for the agent to run later, once or repeatedly; each run's "
            "answer appears in the user's chat list. The schedule is a 5-field cron expression "
            'or English such as "every weekday at 9am", "every 15 minutes", "daily at 14:30", '
            '"every Monday and Friday at 9am", "in 20 minutes", "tomorrow at 9am".'
        ),
        parameters={
            "type": "object",
            "properties": {
                "schedule": {"type": "string", "maxLength": 500},
                "prompt": {
                    "type": "string",
                    "maxLength": MAX_PROMPT_CHARS,
                    "description": "What to do at each run, written as a request to the agent.",
                },
                "name": {"type": "string", "maxLength": MAX_NAME_CHARS},
            },
            "required": ["schedule", "prompt"],
        },
        run=schedule_task,
        outside_text=False,
        lasting=True,
    ),
    Tool(
        name="list_tasks",
        description="List the user's scheduled tasks with their schedules and next runs.",
        parameters={"type": "object", "properties": {}},
        run=list_tasks,
        outside_text=False,
    ),
    Tool(
        name="pause_task",
        description="Pause a scheduled task until it is resumed.",
        parameters=TASK_REFERENCE,
        run=change("Paused", lambda task, actor: task.pause(actor=actor)),
        outside_text=False,
        lasting=True,
    ),
    Tool(
        name="resume_task",
        description="Resume a paused scheduled task from its next scheduled time.",
        parameters=TASK_REFERENCE,
        run=change("Resumed", lambda task, actor: task.resume(actor=actor)),
        outside_text=False,
        lasting=True,
    ),
    Tool(
        name="cancel_task",
        description="Delete a scheduled task for good.",
        parameters=TASK_REFERENCE,
        run=change("Cancelled", lambda task, actor: task.cancel(actor=actor)),
        outside_text=False,
        lasting=True,
    ),
]:
    register(tool)
