"""The tasks page: list, create or edit with a live schedule preview, pause, resume,
run now, delete.

Each action answers htmx with the one row it changed (or the list, after a
create), and a plain request with a redirect back to the page."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from django.contrib import messages
from django.db.models import QuerySet
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from core.history import Actor
from core.htmx import HtmxHttpRequest, render_page
from core.ownership import get_owned_or_404
from scheduler import due_tasks
from scheduler.forms import TaskEditForm, TaskForm
from scheduler.models import ScheduledTask
from scheduler.planning import TaskError, plan
from scheduler.schedule import ScheduleError

log = logging.getLogger(__name__)

ROW = "scheduler/_task_row.html"
PREVIEW = "scheduler/_preview.html"


def owned_tasks(request: HtmxHttpRequest) -> QuerySet[ScheduledTask]:
    return ScheduledTask.objects.owned_by(request.user).select_related("agent")


def task_list(request: HtmxHttpRequest) -> HttpResponse:
    """The page; a POST creates a task (all of it or, on any error, nothing)."""
    form = TaskForm(request.POST if request.method == "POST" else None)
    created = None
    if form.is_valid():
        data = form.cleaned_data
        try:
            created, _ = ScheduledTask.objects.create_task(
                request.user,
                data["schedule"],
                data["prompt"],
                data["name"],
                actor=Actor.user(request.user),
            )
        except TaskError as exc:  # e.g. a duplicate name
            form.add_error(None, str(exc))
        else:
            if not request.htmx:
                messages.success(request, f'Created "{created.name}".')
                return redirect("task-list")
            form = TaskForm()
    context = {"form": form, "tasks": owned_tasks(request), "created": created}
    return render_page(request, "scheduler/tasks.html", context)


def schedule_preview(request: HtmxHttpRequest) -> HttpResponse:
    """What the schedule being typed means: its cron expression and next runs, or why not."""
    return render(request, PREVIEW, preview(request.GET.get("schedule", "")))


def preview(schedule: str) -> dict[str, object]:
    """_preview.html's context for `schedule`."""
    schedule = schedule.strip()
    context: dict[str, object] = {"schedule": schedule}
    if schedule:
        try:
            context["plan"] = plan(schedule)
        except ScheduleError as exc:
            context["error"] = str(exc)
    return context


def task_edit(request: HtmxHttpRequest, pk: uuid.UUID) -> HttpResponse:
    """The schedule and prompt form: in place of the row for htmx, as a page
    otherwise; a valid POST saves them and answers with the changed row."""
    task = get_owned_or_404(owned_tasks(request), request.user, pk=pk)
    try:
        task.check_editable()
    except TaskError as exc:
        return answer(request, task, error=str(exc))
    initial = {"schedule": task.original_schedule, "prompt": task.prompt}
    key = f"-{task.pk}"  # the form's ids, apart from the create form's and other rows'
    data = request.POST if request.method == "POST" else None
    form = TaskEditForm(data, initial=initial, auto_id=f"id_%s{key}")
    if form.is_valid():
        try:
            task.edit(
                form.cleaned_data["schedule"],
                form.cleaned_data["prompt"],
                actor=Actor.user(request.user),
            )
        except TaskError as exc:
            form.add_error(None, str(exc))
        else:
            return answer(request, task, note=f'Saved "{task.name}".')
    context = {"task": task, "form": form, "key": key, **preview(form["schedule"].value() or "")}
    return render_page(request, "scheduler/task_edit.html", context)


def task_row(request: HtmxHttpRequest, pk: uuid.UUID) -> HttpResponse:
    """One row, as it is now (what "cancel" of a delete confirmation swaps back in)."""
    task = get_owned_or_404(owned_tasks(request), request.user, pk=pk)
    if not request.htmx:
        return redirect("task-list")
    return render(request, ROW, {"task": task})


def act(
    request: HtmxHttpRequest,
    pk: uuid.UUID,
    apply: Callable[[ScheduledTask, Actor], str],
    *,
    running: bool = False,
) -> HttpResponse:
    """Apply an action to the user's task; `apply` returns what to tell the user."""
    task = get_owned_or_404(owned_tasks(request), request.user, pk=pk)
    try:
        note = apply(task, Actor.user(request.user))
    except TaskError as exc:
        return answer(request, task, error=str(exc))
    return answer(request, task, note=note, running=running)


def answer(
    request: HtmxHttpRequest,
    task: ScheduledTask,
    note: str = "",
    error: str = "",
    running: bool = False,
) -> HttpResponse:
    """The changed row for htmx; for a plain request, the page with a message."""
    if request.htmx:
        return render(
            request, ROW, {"task": task, "note": note, "error": error, "running": running}
        )
    if error:
        messages.error(request, error)
    else:
        messages.success(request, note)
    return redirect("task-list")


def pause(task: ScheduledTask, actor: Actor) -> str:
    task.pause(actor=actor)
    return "Paused: it will not run until you resume it."


def resume(task: ScheduledTask, actor: Actor) -> str:
    task.resume(actor=actor)
    return "Resumed from its next scheduled time."


def run_now(task: ScheduledTask, actor: Actor) -> str:
    try:
        due_tasks.queue_run_now(task)
    except Exception as exc:  # the broker is down: say so instead of pretending it runs
        log.exception("could not queue scheduled task %s", task.pk)
        raise TaskError(f"Could not start the run ({type(exc).__name__}); try again.") from None
    return f"Running now: the answer will appear in the chat {task.chat_key}."


@require_POST
def task_pause(request: HtmxHttpRequest, pk: uuid.UUID) -> HttpResponse:
    return act(request, pk, pause)


@require_POST
def task_resume(request: HtmxHttpRequest, pk: uuid.UUID) -> HttpResponse:
    return act(request, pk, resume)


@require_POST
def task_run(request: HtmxHttpRequest, pk: uuid.UUID) -> HttpResponse:
    return act(request, pk, run_now, running=True)


def task_delete(request: HtmxHttpRequest, pk: uuid.UUID) -> HttpResponse:
    """GET asks for confirmation (a row for htmx, a page otherwise); POST deletes."""
    task = get_owned_or_404(owned_tasks(request), request.user, pk=pk)
    try:
        task.check_editable()
    except TaskError as exc:
        return answer(request, task, error=str(exc))
    if request.method != "POST":
        return render_page(request, "scheduler/task_delete.html", {"task": task})
    name = task.name
    task.cancel(actor=Actor.user(request.user))
    if request.htmx:
        return HttpResponse("")  # swaps the row for nothing
    messages.success(request, f'Deleted "{name}".')
    return redirect("task-list")
