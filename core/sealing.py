"""Secrets kept at rest encrypted (a model provider's API key): Fernet
(AES-128-CBC + HMAC-SHA256) with a key derived from Django's SECRET_KEY, which
lives in the data dir (core.profiles.secret_key) or NEOTASK_SECRET_KEY.

A backup restored without its secret key cannot open them: `unseal` then says
so, and the person enters the key again."""

from __future__ import annotations

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings

PURPOSE = b"neotask.sealing.v1"


class SealError(Exception):
    """A sealed value that cannot be opened with this instance's secret key."""


def _fernet() -> Fernet:
    # A key of its own, not the SECRET_KEY itself: a leak of one does not give the other.
    digest = hashlib.blake2b(
        settings.SECRET_KEY.encode(), key=PURPOSE, digest_size=32, person=b"neotask"
    ).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def seal(secret: str) -> str:
    return _fernet().encrypt(secret.encode()).decode() if secret else ""


def unseal(sealed: str) -> str:
    if not sealed:
        return ""
    try:
        return _fernet().decrypt(sealed.encode()).decode()
    except (InvalidToken, ValueError):
        raise SealError(
            "The stored API key cannot be read: the instance's secret key changed since it "
            "was saved (a restore without --include-secret-key?). Enter the key again."
        ) from None


def hint(secret: str) -> str:
    """What a page shows of a secret: its last four characters."""
    return f"…{secret[-4:]}" if len(secret) >= 12 else ("set" if secret else "")
