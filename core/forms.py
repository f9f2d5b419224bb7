from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import (
    AuthenticationForm,
    PasswordChangeForm,
    UserCreationForm,
    UsernameField,
)
from django.core.exceptions import ValidationError
from django.http import HttpRequest

from core import throttle
from core.client_address import client_address
from core.models import Change
from core.ownership import Owner


class AdminAccountForm(UserCreationForm):
    """The first account: a superuser who then creates everyone else."""

    def save(self, commit: bool = True) -> Any:
        user = super().save(commit=False)
        user.is_staff = True
        user.is_superuser = True
        if commit:
            user.save()
        return user


class NewUserForm(UserCreationForm):
    """An account a staff member adds: a username, an email if any, the password
    twice (checked by the site's password validators), staff or not."""

    email = forms.EmailField(required=False, label="Email (optional)")
    is_staff = forms.BooleanField(
        required=False, label="Staff: manages the models, adds users, uses the admin"
    )

    class Meta:
        model = get_user_model()
        fields = ("username", "email")
        field_classes = {"username": UsernameField}

    def save(self, commit: bool = True) -> Any:
        user = super().save(commit=False)
        user.is_staff = self.cleaned_data["is_staff"]
        if commit:
            user.save()
        return user


class ThrottledAuthenticationForm(AuthenticationForm):
    """Says so when the login throttle refuses, instead of "wrong password"; and
    when passwords are switched off ([oidc] local_login = false)."""

    def clean(self) -> dict[str, Any]:
        if not settings.NEOTASK["oidc"]["local_login"]:
            raise ValidationError(throttle.PASSWORDS_OFF, code="local_login_off")
        username = str(self.data.get("username", ""))
        if throttle.is_throttled(username, client_address(self.request)):
            raise ValidationError(throttle.REFUSED, code="throttled")
        return super().clean()


class ThrottledPasswordChangeForm(PasswordChangeForm):
    """A wrong current password counts as a failed login of the account, from the
    client's address; once throttled, even the right one is refused."""

    required_css_class = "required"  # as the admin's form has it

    def __init__(self, user: Owner, *args: Any, request: HttpRequest, **kwargs: Any) -> None:
        super().__init__(user, *args, **kwargs)
        self.address = client_address(request)

    def clean_old_password(self) -> str:
        username = self.user.get_username()
        if throttle.is_throttled(username, self.address):
            raise ValidationError(throttle.REFUSED_CHANGE, code="throttled")
        try:
            return super().clean_old_password()
        except ValidationError:
            throttle.count_failure(username, self.address)
            raise


class HistoryFilterForm(forms.Form):
    subject = forms.ChoiceField(
        choices=[("", "Everything"), *Change.Subject.choices], required=False, label="What"
    )
    actor = forms.ChoiceField(
        choices=[("", "Anyone"), *Change.Actor.choices], required=False, label="Who"
    )
    q = forms.CharField(max_length=200, required=False, strip=True, label="Search")

    def clean_q(self) -> str:
        # NUL never matches, and PostgreSQL refuses it in a query.
        return self.cleaned_data["q"].replace("\x00", "")
