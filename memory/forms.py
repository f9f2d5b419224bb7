from __future__ import annotations

from typing import Any

from django import forms
from django.db import IntegrityError, transaction

from core.history import Actor
from core.ownership import Owner
from memory.models import Fact


class FactForm(forms.ModelForm):
    """A fact the user adds or edits; category/key are normalised as the agent's
    tool does, so the page and the agent address the same fact."""

    class Meta:
        model = Fact
        fields = ["category", "key", "value"]
        widgets = {
            "category": forms.TextInput(attrs={"placeholder": "e.g. preference"}),
            "key": forms.TextInput(attrs={"placeholder": "e.g. favourite_color"}),
            "value": forms.Textarea(attrs={"rows": 2, "maxlength": Fact.MAX_VALUE}),
        }

    def __init__(self, *args: Any, owner: Owner, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.owner = owner
        self.duplicate: Fact | None = None

    def clean_category(self) -> str:
        return Fact.normalise(self.cleaned_data["category"])

    def clean_key(self) -> str:
        return Fact.normalise(self.cleaned_data["key"])

    def clean_value(self) -> str:
        value = self.cleaned_data["value"].strip()
        if len(value) > Fact.MAX_VALUE:
            raise forms.ValidationError(
                f"A fact can be at most {Fact.MAX_VALUE:,} characters (this one has "
                f"{len(value):,}); keep longer notes in a memory file."
            )
        return value

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data
        category, key = cleaned.get("category"), cleaned.get("key")
        if category and key:
            # The owner is not a form field, so the model's unique check skips it.
            others = Fact.objects.owned_by(self.owner).exclude(pk=self.instance.pk)
            self.duplicate = others.filter(category=category, key=key).first()
            if self.duplicate is not None:
                raise forms.ValidationError(f"You already have a fact {category}/{key}.")
        return cleaned

    def save(self, commit: bool = True) -> Fact:
        fact = super().save(commit=False)
        fact.owner = self.owner
        fact.source = Fact.Source.USER  # the user wrote or confirmed it
        fact.unverified = False
        if fact.pk is None or "value" in self.changed_data:
            # The value is now the user's own, typed on this page.
            fact.origin, fact.origin_event = Fact.Origin.PAGE, None
            fact.origin_session_id = fact.origin_label = ""
        if commit:
            fact.save_by(Actor.user(self.owner))
        return fact

    def save_unless_taken(self) -> Fact | None:
        """Save; None, with the form's error, when another tab or the agent took the
        category/key between the check in clean() and this save."""
        try:
            with transaction.atomic():
                return self.save()
        except IntegrityError:
            data = self.cleaned_data
            self.add_error(None, f"You already have a fact {data['category']}/{data['key']}.")
            return None
