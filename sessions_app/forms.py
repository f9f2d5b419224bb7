from __future__ import annotations

from django import forms

from sessions_app.models import ApiToken


class ApiTokenForm(forms.ModelForm):
    class Meta:
        model = ApiToken
        fields = ["name"]
        widgets = {"name": forms.TextInput(attrs={"placeholder": "e.g. backup script"})}
