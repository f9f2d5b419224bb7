from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from django import forms

from scheduler.planning import (
    MAX_NAME_CHARS,
    MAX_PROMPT_CHARS,
    TaskError,
    check_name,
    check_prompt,
    plan,
)
from scheduler.schedule import MAX_LENGTH as MAX_SCHEDULE_CHARS
from scheduler.schedule import ScheduleError

T = TypeVar("T")


class TaskEditForm(forms.Form):
    """A task's schedule and prompt, as the tasks page edits them; the checks are
    planning's, so the page, the agent's tool and config.toml refuse the same
    things with the same words."""

    schedule = forms.CharField(
        required=False,
        widget=forms.TextInput(
            attrs={
                "maxlength": MAX_SCHEDULE_CHARS,
                "placeholder": "every weekday at 9am",
                "autocomplete": "off",
            }
        ),
    )
    prompt = forms.CharField(
        required=False,
        strip=False,
        widget=forms.Textarea(
            attrs={
                "rows": 3,
                "maxlength": MAX_PROMPT_CHARS,
                "placeholder": "summarise my open todos",
            }
        ),
    )

    def clean_schedule(self) -> str:
        schedule = self.cleaned_data["schedule"]
        as_validation_error(plan, schedule)
        return schedule

    def clean_prompt(self) -> str:
        return as_validation_error(check_prompt, self.cleaned_data["prompt"])


class TaskForm(TaskEditForm):
    """The tasks page's create form: a schedule, a prompt and a name."""

    name = forms.CharField(
        required=False,
        widget=forms.TextInput(
            attrs={"maxlength": MAX_NAME_CHARS, "placeholder": "Defaults to the prompt's start"}
        ),
    )

    def clean_name(self) -> str:
        name = self.cleaned_data["name"]
        if not name.strip():
            return ""  # named after the prompt
        return as_validation_error(check_name, name)


def as_validation_error(check: Callable[[str], T], value: str) -> T:
    try:
        return check(value)
    except (TaskError, ScheduleError) as exc:
        raise forms.ValidationError(str(exc)) from None
