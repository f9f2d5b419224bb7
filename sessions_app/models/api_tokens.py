"""Personal tokens for the programs' APIs."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import secrets
from collections.abc import Collection
from datetime import timedelta

from django.db import DatabaseError, models, transaction
from django.utils import timezone

from core.history import Actor, Recorded
from core.models import Change
from core.ownership import OwnedModel, Owner

TOKEN_SCHEME = "nt"
# last_used_at is a hint for the user, not an audit log: one write a minute at most.
TOKEN_TOUCH_INTERVAL = timedelta(minutes=1)


def hash_secret(secret: str) -> str:
    # Secrets are 256 random bits, so a fast hash is enough (no brute force to slow down).
    return hashlib.sha256(secret.encode()).hexdigest()


class Api(models.TextChoices):
    """The programs' APIs a token may be good for."""

    JSON = "api", "/api/v1"
    OPENAI = "v1", "/v1"
    MCP = "mcp", "/mcp"


def every_api() -> list[str]:
    """A token's APIs unless it names fewer (and those of every token made before
    tokens had a scope)."""
    return [api.value for api in Api]


class ApiToken(Recorded, OwnedModel):
    """A personal token for the programs' APIs, `nt_<prefix>_<secret>`: good for
    the APIs it names, until it expires (if it does) or is revoked. Only the
    secret's hash is stored: the whole token is shown once, at creation. Its
    creation and revocation go to its owner's history."""

    name = models.CharField(max_length=100, help_text="What the token is for, e.g. a script.")
    # Public: shown in the UI and used to find the row; the secret decides.
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    secret_hash = models.CharField(max_length=64, editable=False)
    apis = models.JSONField(default=every_api, help_text="The APIs it is good for (Api values).")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty: it never expires.")
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)

    history_subject = Change.Subject.API_TOKEN
    history_fields = ("name", "prefix", "revoked_at")

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.masked})"

    @property
    def masked(self) -> str:
        """How the UI shows the token: enough to recognise it, not to use it."""
        return f"{TOKEN_SCHEME}_{self.prefix}_…"

    @classmethod
    def issue(
        cls,
        owner: Owner,
        name: str,
        apis: Collection[str] = (),
        lifetime: timedelta | None = None,
        actor: Actor | None = None,
    ) -> tuple[ApiToken, str]:
        """A new token and its full text, which is never available again: good
        for `apis` (every API if none is named) for `lifetime` (or until revoked)."""
        prefix, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
        token = cls(
            owner=owner,
            name=name,
            prefix=prefix,
            secret_hash=hash_secret(secret),
            apis=[api.value for api in Api if api.value in apis] if apis else every_api(),
            expires_at=timezone.now() + lifetime if lifetime else None,
        )
        token.save_by(actor or Actor.user(owner))
        return token, f"{TOKEN_SCHEME}_{prefix}_{secret}"

    @classmethod
    def authenticate(cls, presented: str, api: str) -> ApiToken | None:
        """The live token `presented` is, with its owner, if it is good for `api`;
        None if it is malformed, unknown, wrong, revoked, expired or for other
        APIs, or its owner is inactive."""
        scheme, _, rest = presented.partition("_")
        prefix, _, secret = rest.partition("_")
        if scheme != TOKEN_SCHEME or not prefix or not secret or "\x00" in presented:
            return None  # (PostgreSQL refuses NUL in a query)
        # Not owner-scoped: nobody is known yet, finding out who is the point.
        token = (
            cls.objects.select_related("owner")
            .filter(prefix=prefix, revoked_at__isnull=True)
            .first()
        )
        if token is None or not hmac.compare_digest(token.secret_hash, hash_secret(secret)):
            return None
        if not token.owner.is_active or token.is_expired or api not in token.apis:
            return None
        token.touch()
        return token

    def touch(self) -> None:
        now = timezone.now()
        if self.last_used_at is None or now - self.last_used_at >= TOKEN_TOUCH_INTERVAL:
            # A hint: a database that cannot write (a full disk) still lets the token read.
            with contextlib.suppress(DatabaseError), transaction.atomic():
                ApiToken.objects.filter(pk=self.pk).update(last_used_at=now)
                self.last_used_at = now

    def revoke(self, actor: Actor | None = None) -> None:
        """By `actor` (its owner, unless said)."""
        if self.revoked_at is None:
            before = self.stored()
            self.revoked_at = timezone.now()
            actor = actor or Actor.user(self.owner)
            self.save_by(actor, before=before, update_fields=["revoked_at"])

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None

    @property
    def is_expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

    @property
    def api_labels(self) -> list[str]:
        return [api.label for api in Api if api.value in self.apis]
