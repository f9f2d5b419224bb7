from __future__ import annotations

from typing import Any

from django.contrib.auth.forms import AuthenticationForm, UserCreationForm
from django.core.exceptions import ValidationError

from neotask_site import throttle


class AdminAccountForm(UserCreationForm):
    """The first account: a superuser who then creates everyone else."""

    def save(self, commit: bool = True) -> Any:
        user = super().save(commit=False)
        user.is_staff = True
        user.is_superuser = True
        if commit:
            user.save()
        return user


class ThrottledAuthenticationForm(AuthenticationForm):
    """Says so when the login throttle refuses, instead of "wrong password"."""

    def clean(self) -> dict[str, Any]:
        username = str(self.data.get("username", ""))
        if throttle.is_throttled(username, throttle.address_of(self.request)):
            raise ValidationError(throttle.REFUSED, code="throttled")
        return super().clean()
