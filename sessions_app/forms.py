from __future__ import annotations

from django import forms

from sessions_app.models import ApiToken, Session


class ApiTokenForm(forms.ModelForm):
    class Meta:
        model = ApiToken
        fields = ["name"]
        widgets = {"name": forms.TextInput(attrs={"placeholder": "e.g. backup script"})}


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
