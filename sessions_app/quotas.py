"""Quotas: how many messages a user may send a minute and how many model tokens
(prompt and answer) they may use a day.

A user's limits are the `[quotas]` defaults of config.toml, unless one of their
groups has a `GroupQuota`: then the most generous of those groups' limits apply
(0 is no limit, the most generous of all). Superusers have none. A change of a
group's quota or of a user's groups applies at once in the process that made
it and within 30 s in the others (`GROUP_LIMITS`).

Only inputs that make the model work count (a message, a retry, /new with a
message); commands answered at once do not. `admit` counts one in the
transaction that stores it (sessions_app.runner.enqueue), with one
`INSERT … ON CONFLICT … DO UPDATE … WHERE` on the user's `DailyUsage` row: when
a limit is reached the statement changes nothing, the input is refused before
it is stored, and two requests at once cannot both take the last place (the
database serialises them on the row). Scheduled runs are counted but not held
to the per-minute limit: nobody is typing them.

A turn's tokens are known only once it ran, so under a daily token limit an
input that will run the model is admitted only while the day's tokens plus
those reserved by inputs still running are below the limit, and reserves
`[quotas] reserve_per_turn` tokens itself in the same statement. `add_tokens`
adds what the turn used; the reservation is given back when the input
finishes (ChatInput.finish, whichever way it ended, a dead holder's input
included). Inputs that start together therefore share the day's remainder
instead of each seeing all of it: as long as no turn uses more than its
reservation, the day ends below the limit plus the last admitted turn's
tokens, however many arrive at once (docs/running.md#quotas). A reservation
lives on its day's row, so one never outlasts the day.

Days are the site's (settings.TIME_ZONE), as for the daily session reset.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from agent.frames import Refused
from core.api import TooManyRequests
from core.ownership import Owner
from core.process_cache import ProcessCache
from sessions_app.models import ChatInput, DailyUsage, GroupQuota

WINDOW = timedelta(minutes=1)
MESSAGES_PER_MINUTE = "messages_per_minute"
TOKENS_PER_DAY = "tokens_per_day"
RESERVED_RETRY_SECONDS = 10  # a turn usually ends within this


@dataclass(frozen=True)
class Limits:
    messages_per_minute: int = 0  # 0: no limit
    tokens_per_day: int = 0


@dataclass(frozen=True)
class Reservation:
    """The tokens `admit` reserved for an input on its owner's day (none without
    a daily token limit), kept on the input until it finishes."""

    tokens: int = 0
    day: date | None = None

    def fields(self) -> dict[str, Any]:
        """The ChatInput fields that keep it."""
        return {"reserved_tokens": self.tokens, "reserved_day": self.day if self.tokens else None}


class QuotaExceeded(TooManyRequests):
    """An input refused, and not stored: which limit, and in how many seconds
    the user may send again (a 429 in the APIs: core.api.http_error)."""

    def frame(self, text: str = "") -> Refused:
        """The chat's error frame, handing the refused `text` back to the sender."""
        return Refused(str(self), self.limit, self.retry_after, text)


def limits_for(owner: Owner) -> Limits:
    if owner.is_superuser:
        return Limits()
    groups = GROUP_LIMITS.get(owner.pk, lambda: group_limits(owner))
    if not groups:
        defaults = settings.NEOTASK["quotas"]
        return Limits(defaults[MESSAGES_PER_MINUTE], defaults[TOKENS_PER_DAY])
    return Limits(
        most_generous(limit for limit, _ in groups), most_generous(limit for _, limit in groups)
    )


def group_limits(owner: Owner) -> list[tuple[int, int]]:
    """The limits of the owner's groups that have a quota."""
    quotas = GroupQuota.objects.filter(group__user=owner)
    return list(quotas.values_list(MESSAGES_PER_MINUTE, TOKENS_PER_DAY))


# Read on every input, changed in the admin: each process keeps a user's groups'
# limits for 30 s (sessions_app.signals clears them on a change here).
GROUP_LIMITS: ProcessCache[list[tuple[int, int]]] = ProcessCache(seconds=30)


def most_generous(limits: Iterable[int]) -> int:
    values = list(limits)
    return 0 if 0 in values else max(values)


def counts(kind: str, text: str) -> bool:
    """Whether an input of `kind` makes the model work (a bare /new does not)."""
    return kind in (ChatInput.Kind.MESSAGE, ChatInput.Kind.RETRY) or bool(
        kind == ChatInput.Kind.RESET and text
    )


def admit_input(owner: Owner, kind: str, text: str, *, paced: bool = True) -> Reservation:
    """`admit` a chat input of `kind` as what it costs (`input_admission`)."""
    return admit_by(owner, input_admission(owner, kind, text, paced=paced))


def input_admission(owner: Owner, kind: str, text: str, *, paced: bool = True) -> Admission | None:
    """What a chat input of `kind` costs: a message counted and its turn's tokens
    reserved; an OpenAI-compatible client's tool results (the turn that handed
    out the calls goes on) only the tokens; a command without model work nothing."""
    if counts(kind, text):
        return admission(owner, paced=paced, model=True)
    if kind == ChatInput.Kind.TOOL_RESULTS:
        return admission(owner, paced=False, model=True, message=False)
    return None


def admit(
    owner: Owner,
    *,
    paced: bool = True,
    model: bool = False,
    message: bool = True,
    now: datetime | None = None,
) -> Reservation:
    """Count one input of `owner`'s, or raise QuotaExceeded having counted
    nothing. `paced`: held to the per-minute limit (a person's input, not a
    scheduled run's). `model`: it will run the model, so under a daily token
    limit it needs room beside the running inputs' reservations and reserves
    its own (the returned Reservation, given back when it finishes). Without
    `message`, only that: no message is counted. Call it in the transaction
    that stores the input."""
    counting = admission(owner, paced=paced, model=model, message=message, now=now)
    return admit_by(owner, counting)


def admit_by(owner: Owner, counting: Admission | None) -> Reservation:
    """Run `counting`'s statement: its reservation, or QuotaExceeded."""
    if counting is None:
        return Reservation()
    with connection.cursor() as cursor:
        cursor.execute(counting.sql, counting.params)
        if cursor.rowcount != 1:
            raise counting.refused(owner)
    return counting.reservation


@dataclass(frozen=True)
class Admission:
    """The statement that counts an input, one `INSERT … ON CONFLICT … DO UPDATE
    … WHERE` that changes nothing when a limit is reached (a caller may run it
    as part of a larger statement: sessions_app.models.ChatInputQuerySet.store),
    and the reservation it makes."""

    sql: str
    params: list[Any]
    reservation: Reservation
    limits: Limits
    now: datetime

    def refused(self, owner: Owner) -> QuotaExceeded:
        """Why the statement changed nothing."""
        day = timezone.localdate(self.now)
        return refusal(DailyUsage.objects.get(owner=owner, day=day), self.limits, self.now)


def admission(
    owner: Owner,
    *,
    paced: bool = True,
    model: bool = False,
    message: bool = True,
    now: datetime | None = None,
) -> Admission | None:
    """`admit`'s statement; None if there is nothing to count."""
    limits = limits_for(owner)
    now = now or timezone.now()
    day = timezone.localdate(now)
    reserve = 0
    if model and limits.tokens_per_day:
        reserve = settings.NEOTASK["quotas"]["reserve_per_turn"]
    if not message and not reserve:
        return None  # nothing to count, and no limit to hold it to
    paced = paced and message
    ops = connection.ops
    quote = ops.quote_name
    table = quote(DailyUsage._meta.db_table)

    def column(name: str) -> str:
        return f"{table}.{quote(name)}"

    start, count = column("window_start"), column("window_messages")
    edge = ops.adapt_datetimefield_value(now - WINDOW)
    at = ops.adapt_datetimefield_value(now)
    # A window opens with the first message after the last one closed.
    closed = f"({start} IS NULL OR {start} <= %s)"
    updates = [f"{quote('messages')} = {column('messages')} + {int(message)}"]
    params: list[Any] = []
    if paced:
        updates += [
            f"{quote('window_start')} = CASE WHEN {closed} THEN %s ELSE {start} END",
            f"{quote('window_messages')} = CASE WHEN {closed} THEN 1 ELSE {count} + 1 END",
        ]
        params += [edge, at, edge]
    if reserve:
        updates.append(f"{quote('reserved')} = {column('reserved')} + %s")
        params.append(reserve)
    conditions = []
    if paced and limits.messages_per_minute:
        conditions.append(f"({closed} OR {count} < %s)")
        params += [edge, limits.messages_per_minute]
    if limits.tokens_per_day:
        # The model's turns need room beside what the running ones reserved;
        # an MCP tool call (no model) only a day not yet used up.
        used = f"{column('tokens')} + {column('reserved')}" if reserve else column("tokens")
        conditions.append(f"{used} < %s")
        params.append(limits.tokens_per_day)
    sql = (
        f"INSERT INTO {table} ({quote('owner_id')}, {quote('day')}, {quote('messages')}, "
        f"{quote('tokens')}, {quote('reserved')}, {quote('window_start')}, "
        f"{quote('window_messages')}, {quote('created_at')}) "
        f"VALUES (%s, %s, %s, 0, %s, %s, %s, %s) "
        f"ON CONFLICT ({quote('owner_id')}, {quote('day')}) DO UPDATE SET {', '.join(updates)}"
        + (f" WHERE {' AND '.join(conditions)}" if conditions else "")
    )
    values: list[Any] = [
        owner.pk,
        ops.adapt_datefield_value(day),
        int(message),
        reserve,
        at if paced else None,
        int(paced),
        at,
    ]
    return Admission(sql, values + params, Reservation(reserve, day), limits, now)


def refusal(usage: DailyUsage, limits: Limits, now: datetime) -> QuotaExceeded:
    """Why `usage` has no room for another input, and for how long."""
    if limits.tokens_per_day and usage.tokens >= limits.tokens_per_day:
        wait = seconds_to_next_day(now)
        return QuotaExceeded(
            f"You've used your {limits.tokens_per_day:,} tokens for today; "
            f"try again in {duration(wait)}.",
            TOKENS_PER_DAY,
            wait,
        )
    if limits.tokens_per_day and usage.tokens + usage.reserved >= limits.tokens_per_day:
        return QuotaExceeded(
            f"Your turns running now have reserved the rest of today's "
            f"{limits.tokens_per_day:,} tokens; try again when they have finished.",
            TOKENS_PER_DAY,
            RESERVED_RETRY_SECONDS,
        )
    assert usage.window_start is not None  # a full window has started
    wait = max(1, math.ceil((usage.window_start + WINDOW - now).total_seconds()))
    return QuotaExceeded(
        f"You've sent {usage.window_messages} messages this minute; try again in {wait} s.",
        MESSAGES_PER_MINUTE,
        wait,
    )


def add_tokens(owner_id: int, tokens: int, now: datetime | None = None) -> None:
    """Add a turn's tokens to its owner's day, in one statement (another
    process may be adding to the same day); its reservation is given back
    when its input finishes (ChatInput.finish)."""
    if tokens <= 0:
        return
    now = now or timezone.now()
    ops = connection.ops
    quote = ops.quote_name
    table = quote(DailyUsage._meta.db_table)
    sql = (
        f"INSERT INTO {table} ({quote('owner_id')}, {quote('day')}, {quote('messages')}, "
        f"{quote('tokens')}, {quote('reserved')}, {quote('window_messages')}, "
        f"{quote('created_at')}) VALUES (%s, %s, 0, %s, 0, 0, %s) "
        f"ON CONFLICT ({quote('owner_id')}, {quote('day')}) "
        f"DO UPDATE SET {quote('tokens')} = {table}.{quote('tokens')} + %s"
    )
    day = ops.adapt_datefield_value(timezone.localdate(now))
    with connection.cursor() as cursor:
        cursor.execute(sql, [owner_id, day, tokens, ops.adapt_datetimefield_value(now), tokens])


def seconds_to_next_day(now: datetime) -> int:
    """Until the site's next midnight, when the day's tokens start again."""
    zone = timezone.get_current_timezone()
    tomorrow = timezone.localdate(now) + timedelta(days=1)
    midnight = datetime.combine(tomorrow, time(0), tzinfo=zone)
    return max(1, math.ceil((midnight - now).total_seconds()))


def duration(seconds: int) -> str:
    if seconds < 60:
        return f"{seconds} s"
    minutes = math.ceil(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"
