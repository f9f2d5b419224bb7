from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms

from agent import providers
from agent.forms import ModelChoiceField
from core.ownership import Owner
from memory.workspace import validate_agent_name
from sessions_app.models import Agent, Api, ApiToken, Session, every_api

SYSTEM_PROMPT_LENGTH = 20_000  # characters: it is in every prompt the agent sends


class ApiTokenForm(forms.ModelForm):
    """A new token's name, the APIs it is good for and how long (left out: every
    API, for ever, as tokens were before they had either)."""

    SCOPES = {"": every_api(), **{api.value: [api.value] for api in Api}}
    LIFETIMES = {"": None, **{str(days): timedelta(days=days) for days in (7, 30, 90, 365)}}

    scope = forms.ChoiceField(
        label="Good for",
        required=False,
        choices=[("", "Every API: /api/v1, /v1 and /mcp")]
        + [(api.value, f"{api.label} only") for api in Api],
    )
    lifetime = forms.ChoiceField(
        label="Expires",
        required=False,
        choices=[("", "Never (until revoked)")]
        + [(key, f"In {key} days") for key in LIFETIMES if key],
    )

    class Meta:
        model = ApiToken
        fields = ["name"]
        widgets = {"name": forms.TextInput(attrs={"placeholder": "e.g. backup script"})}

    def issue(self, owner: Owner) -> str:
        """The new token's full text (shown this once)."""
        data = self.cleaned_data
        return ApiToken.issue(
            owner,
            data["name"],
            apis=self.SCOPES[data["scope"]],
            lifetime=self.LIFETIMES[data["lifetime"]],
        )[1]


class ChatTitleForm(forms.Form):
    title = forms.CharField(
        max_length=Session._meta.get_field("title").max_length,
        error_messages={
            "required": "Give the chat a title.",
            "max_length": (
                "A title can have at most %(limit_value)d characters (it has %(show_value)d)."
            ),
        },
    )


class AgentNameForm(forms.Form):
    """A new name for an agent (sessions_app.agents.rename_agent does the rest)."""

    name = forms.CharField(max_length=64, validators=[validate_agent_name])


class AgentPromptForm(forms.ModelForm):
    """An agent's system prompt and model. Its name changes through
    AgentNameForm: it names its workspace directory and is part of its chats'
    session keys (sessions_app.agents)."""

    system_prompt = forms.CharField(
        required=False,
        max_length=SYSTEM_PROMPT_LENGTH,
        widget=forms.Textarea(attrs={"rows": 6}),
        help_text="Instructions the agent follows in every chat, e.g. its role and tone.",
    )

    class Meta:
        model = Agent
        fields = ["system_prompt", "model"]

    def __init__(self, owner: Owner, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.owner = owner
        self.fields["model"] = ModelChoiceField(
            owner,
            providers.default_key(),
            label="Model",
            help_text="Its chats use it unless they choose another in their header.",
        )
        field = self.fields["model"]
        self.initial["model"] = field.initial_for(owner, self.instance.model)  # type: ignore[attr-defined]


class NewAgentForm(AgentPromptForm):
    def __init__(self, owner: Owner, *args: Any, **kwargs: Any) -> None:
        super().__init__(owner, *args, **kwargs)
        # The whole rule in one message (the model's validator says less of it).
        self.fields["name"].validators = [validate_agent_name]

    class Meta:
        model = Agent
        fields = ["name", "system_prompt", "model"]
        widgets = {"name": forms.TextInput(attrs={"placeholder": "e.g. research"})}
        help_texts = {"name": "Fixed once created: it names the agent's workspace and chats."}

    def clean_name(self) -> str:
        name = self.cleaned_data["name"]
        if Agent.objects.owned_by(self.owner).filter(name=name).exists():
            raise forms.ValidationError(f"You already have an agent named {name!r}.")
        return name

    def save(self, commit: bool = True) -> Agent:
        self.instance.owner = self.owner
        return super().save(commit)
