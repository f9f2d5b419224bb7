from __future__ import annotations

import re
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import transaction

from agent import outbound, providers
from agent.models import McpServer, ModelProvider
from agent.outbound import Policy
from core.ownership import Owner
from core.sealing import hint, seal

MODEL_NAME_LENGTH = 200
MAX_MODELS = 50


def checked_url(url: str, policy: Policy) -> str:
    """`url` if the outbound policy lets it be reached now (agent.outbound: it is
    checked again at every connection); a clear error if not."""
    try:
        outbound.check_url(url, policy)
    except outbound.Refused as exc:
        raise forms.ValidationError(f"Refused: {exc}.") from None
    return url


class ProviderForm(forms.ModelForm):
    """A provider as a staff member (`user`) enters it. The API key is
    write-only: the page shows its last characters, an empty field keeps the
    stored key — unless the base URL changes: a key is only ever sent where it
    was entered for, so it must be entered again."""

    api_key = forms.CharField(
        label="API key",
        required=False,
        strip=True,
        max_length=1000,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
    )
    forget_key = forms.BooleanField(label="Remove the stored key", required=False)

    class Meta:
        model = ModelProvider
        fields = [
            "name",
            "base_url",
            "api_key",
            "offered_models",
            "context_window",
            "is_default",
            "enabled",
            "groups",
        ]
        widgets = {
            "name": forms.TextInput(attrs={"placeholder": "e.g. Ollama"}),
            "base_url": forms.URLInput(attrs={"placeholder": "http://localhost:11434/v1"}),
            "offered_models": forms.Textarea(attrs={"rows": 3, "placeholder": "llama3.2"}),
            "groups": forms.CheckboxSelectMultiple,
        }
        error_messages = {
            "offered_models": {"required": "Name at least one model the endpoint serves."}
        }

    def __init__(self, user: Owner, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.user = user
        self.key_forgotten = False  # the base URL changed and took the stored key with it
        saved = self.instance.api_key_hint
        self.fields["api_key"].help_text = (
            f"Saved ({saved}); leave empty to keep it. Changing the base URL removes it: "
            "enter it again."
            if saved
            else "Leave empty for endpoints without keys (Ollama, llama.cpp's server)."
        )
        if not saved:
            del self.fields["forget_key"]
        self.fields["context_window"].widget.attrs["min"] = 512

    def clean_base_url(self) -> str:
        url = self.cleaned_data["base_url"].strip().rstrip("/")
        try:
            URLValidator(schemes=["http", "https"])(url)
        except ValidationError:
            raise forms.ValidationError(
                "Enter an http:// or https:// URL, e.g. http://localhost:11434/v1."
            ) from None
        if "?" in url or "#" in url:  # the client appends paths: these would send it elsewhere
            raise forms.ValidationError("A base URL has no ?query or #fragment.")
        # An unchanged URL keeps the policy of whoever set it (a superuser's Ollama
        # on localhost stays editable by staff); a new one is this user's.
        unchanged = self.instance.pk is not None and url == self.instance.base_url
        setter = self.instance.url_set_by if unchanged else self.user
        return checked_url(url, outbound.policy_of(setter))

    @property
    def url_changed(self) -> bool:
        return self.instance.pk is not None and "base_url" in self.changed_data

    def clean_offered_models(self) -> str:
        names = [line.strip() for line in self.cleaned_data["offered_models"].splitlines()]
        names = list(dict.fromkeys(name for name in names if name))
        if not names:
            raise forms.ValidationError("Name at least one model the endpoint serves.")
        if len(names) > MAX_MODELS:
            raise forms.ValidationError(f"At most {MAX_MODELS} models per provider.")
        for name in names:
            if len(name) > MODEL_NAME_LENGTH or any(c.isspace() for c in name):
                raise forms.ValidationError(
                    f"{name[:40]!r} is not a model name (one per line, no spaces, "
                    f"at most {MODEL_NAME_LENGTH} characters)."
                )
        return "\n".join(names)

    def clean_context_window(self) -> int:
        window = self.cleaned_data["context_window"]
        if window < 512:
            raise forms.ValidationError("The context window must be at least 512 tokens.")
        return window

    def save(self, commit: bool = True) -> ModelProvider:
        before = self.instance.stored()  # the form's values are on the instance already
        provider = super().save(commit=False)
        key = self.cleaned_data.get("api_key", "")
        if key:
            provider.sealed_api_key, provider.api_key_hint = seal(key), hint(key)
        elif self.cleaned_data.get("forget_key") or (self.url_changed and provider.api_key_hint):
            self.key_forgotten = not self.cleaned_data.get("forget_key")
            provider.sealed_api_key = provider.api_key_hint = ""
        if before is None or self.url_changed or self.user.is_superuser:
            provider.url_set_by = self.user  # whose URL it is decides where it may go
        if set(self.changed_data) & {"base_url", "api_key", "forget_key", "offered_models"}:
            provider.tested_at, provider.test_passed, provider.test_message = None, False, ""
        if commit:
            with transaction.atomic():
                if provider.is_default:  # one default: the others step back
                    ModelProvider.objects.exclude(pk=provider.pk).update(is_default=False)
                provider.save()
                self.save_m2m()
                provider.record(self.user, before)
        return provider


class ModelChoiceField(forms.ChoiceField):
    """A model choice among those `owner` may use, each once. The default's
    (`default_key`, e.g. the chat's agent's) is "", marked "(default)": choosing
    it follows the default wherever it goes later."""

    def __init__(self, owner: Owner, default_key: str, **kwargs: Any) -> None:
        groups: dict[str, list[tuple[str, str]]] = {}
        self.default_key = default_key
        for choice in providers.offered(owner):
            key, label = choice.key, choice.label
            if key == default_key:
                key, label = "", f"{label} (default)"
            groups.setdefault(choice.group, []).append((key, label))
        options: list[Any] = list(groups.items())
        if not any(key == "" for entries in groups.values() for key, _ in entries):
            options.insert(0, ("", "Default"))
        super().__init__(choices=options, required=False, **kwargs)
        self.error_messages["invalid_choice"] = "That model is not offered to you (any more)."

    def valid_value(self, value: Any) -> bool:
        return value == self.default_key or super().valid_value(value)

    def clean(self, value: Any) -> str:
        key = super().clean(value)
        return "" if key == self.default_key else key

    def initial_for(self, owner: Owner, key: str) -> str:
        """What the select shows for a stored `key`: "" for the default's, or for
        one no longer offered (it answers with the default)."""
        effective = providers.effective_key(owner, key)
        return "" if not key or effective != key or key == self.default_key else key


class ChatModelForm(forms.Form):
    def __init__(self, owner: Owner, default_key: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["model"] = ModelChoiceField(
            owner,
            default_key,
            label="Model",
            widget=forms.Select(
                attrs={"id": "chat-model", "title": "The model that answers in this chat"}
            ),
        )


SERVER_NAME = re.compile(r"[a-z0-9]+(_[a-z0-9]+)*")
STDIO_REFUSED = (
    "Enter the http:// or https:// URL of an MCP server (streamable HTTP), e.g. "
    "http://localhost:8000/mcp. Servers started as a command (stdio) are not offered: "
    "Neotask would run that command on its own machine, outside the terminal's sandbox."
)


class McpServerForm(forms.Form):
    """An MCP server as its owner adds it; the token is write-only, as a provider's key."""

    name = forms.CharField(
        max_length=30,
        help_text="Lowercase letters and digits, single _ between; e.g. weather.",
        widget=forms.TextInput(attrs={"placeholder": "weather"}),
    )
    url = forms.CharField(
        label="URL", max_length=500, widget=forms.TextInput(attrs={"placeholder": "https://…/mcp"})
    )
    token = forms.CharField(
        label="Bearer token",
        required=False,
        max_length=1000,
        help_text="If the server asks for one; stored encrypted.",
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
    )

    for_everyone = forms.BooleanField(
        label="Offer to everyone",
        required=False,
        help_text="Its tools are offered to every user's agent under your token; each call "
        "still waits for that user's approval.",
    )

    def __init__(self, owner: Owner, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.owner = owner
        if not owner.is_superuser:
            del self.fields["for_everyone"]

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        if not SERVER_NAME.fullmatch(name):
            raise forms.ValidationError(
                "Use lowercase letters and digits, with single _ between words (e.g. my_files)."
            )
        if McpServer.objects.owned_by(self.owner).filter(name=name).exists():
            raise forms.ValidationError("You have a server of that name.")
        return name

    def clean_url(self) -> str:
        url = self.cleaned_data["url"].strip()
        try:
            URLValidator(schemes=["http", "https"])(url)
        except ValidationError:
            raise forms.ValidationError(STDIO_REFUSED) from None
        return checked_url(url, outbound.policy_of(self.owner))
