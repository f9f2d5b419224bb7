from __future__ import annotations

from django.contrib.auth.forms import UserCreationForm


class AdminAccountForm(UserCreationForm):
    """The first account: a superuser who then creates everyone else."""

    def save(self, commit: bool = True):  # type: ignore[no-untyped-def]
        user = super().save(commit=False)
        user.is_staff = True
        user.is_superuser = True
        if commit:
            user.save()
        return user
