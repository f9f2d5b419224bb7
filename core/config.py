"""Neotask's configuration: config.toml, overridden by environment variables.

Every key has a default, a type and a check; `load_config` returns plain dicts
(`{"memory": {...}, "llm": {...}, "scheduled_tasks": [...]}`) or raises
`ConfigError` with one sentence naming the bad key, variable or file line.
Every key of a section can be overridden by `NEOTASK_<SECTION>_<KEY>`, e.g.
`NEOTASK_LLM_BASE_URL` or `NEOTASK_MEMORY_WORKING_MEMORY_CAP`.
"""

from __future__ import annotations

import difflib
import ipaddress
import math
import tomllib
import zoneinfo
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The agent a chat or a task talks to unless told another: its workspace's
# directory name (memory.workspace, which every app imports it from).
DEFAULT_AGENT = "main"


class ConfigError(Exception):
    """A configuration problem, worded for the person who runs Neotask."""


Check = Callable[[Any], "str | None"]


def at_least(minimum: float) -> Check:
    return lambda v: None if v >= minimum else f"must be at least {minimum}"


def between(low: float, high: float) -> Check:
    return lambda v: None if low <= v <= high else f"must be between {low} and {high}"


def one_of(*choices: str) -> Check:
    return lambda v: None if v in choices else f"must be one of {', '.join(map(repr, choices))}"


def http_url_or_empty(value: str) -> str | None:
    if value == "" or value.startswith(("http://", "https://")):
        return None
    return "must be an http:// or https:// URL (or empty for the embedded local model)"


def token_or_empty(value: str) -> str | None:
    if value == "" or len(value.strip()) >= 24:
        return None
    return "must be empty (no metrics) or a random string of at least 24 characters"


def time_zone_name(value: str) -> str | None:
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return f"{value!r} is not a known time zone (e.g. 'Europe/Berlin', 'UTC')"
    return None


def http_url_or_blank(value: str) -> str | None:
    if value == "" or value.startswith(("http://", "https://")):
        return None
    return "must be an http:// or https:// URL (or empty for no single sign-on)"


def not_blank(value: str) -> str | None:
    return "must not be empty" if not value.strip() else None


def comma_list(text: str) -> list[str]:
    """ "a, b ,c" -> ["a", "b", "c"]; empty items dropped."""
    return [item.strip() for item in text.split(",") if item.strip()]


def group_map(text: str) -> dict[str, str]:
    """[oidc] group_map: "provider-group = Django group, ..." as a dict; ValueError
    naming the bad item."""
    pairs = {}
    for item in comma_list(text):
        provider_group, equals, django_group = (part.strip() for part in item.partition("="))
        if not equals or not provider_group or not django_group:
            raise ValueError(f"{item!r} is not written as provider-group = Django group")
        pairs[provider_group] = django_group
    return pairs


def address_list(text: str) -> str | None:
    """[network] allow_private: "127.0.0.1, 10.0.0.0/8, fd00::/8" (agent.outbound)."""
    for item in comma_list(text):
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            return (
                "must be a comma-separated list of IP addresses or networks, e.g. "
                f"'127.0.0.1, 10.0.0.0/8': {item!r} is neither"
            )
    return None


def group_map_text(text: str) -> str | None:
    try:
        group_map(text)
    except ValueError as exc:
        return f"must be a comma-separated list of provider-group = Django group: {exc}"
    return None


@dataclass(frozen=True)
class Option:
    default: Any
    check: Check | None = None

    @property
    def type(self) -> type:
        return type(self.default)


SCHEMA: dict[str, dict[str, Option]] = {
    "server": {
        "time_zone": Option("UTC", time_zone_name),
        # "json": one JSON object a line, with the request and chat ids (docs/deploy.md).
        "log_format": Option("plain", one_of("plain", "json")),
        # Plain logs: INFO lines and daphne's access log too (`manage.py serve --verbose`).
        "verbose": Option(False),
        # The bearer token Prometheus sends to /metrics; empty: no /metrics at all.
        "metrics_token": Option("", token_or_empty),
    },
    "memory": {
        "working_memory_cap": Option(50, at_least(1)),
        "consolidation_interval_hours": Option(6.0, at_least(0.1)),
        "consolidation_min_age_hours": Option(12.0, at_least(0.0)),
        "fact_duplicate_similarity": Option(0.9, between(0.0, 1.0)),
        "recall_limit": Option(4, at_least(0)),
        "recall_min_score": Option(0.35, between(-1.0, 1.0)),
        "recency_limit": Option(10, at_least(0)),
        "relevance_limit": Option(5, at_least(0)),
        "relevance_min_importance": Option(0.8, between(0.0, 1.0)),
        "similarity_limit": Option(5, at_least(0)),
        "similarity_threshold": Option(0.65, between(-1.0, 1.0)),
        "search_limit": Option(5, at_least(0)),
        "search_min_similarity": Option(0.3, between(-1.0, 1.0)),
        "file_chunk_chars": Option(1000, at_least(100)),
        "file_chunk_overlap_chars": Option(200, at_least(0)),
        "file_max_bytes": Option(1_000_000, at_least(1024)),
        "vector_backend": Option("numpy", one_of("numpy", "lancedb")),
    },
    "sessions": {
        "daily_reset_hour": Option(4, between(0, 23)),
        "idle_minutes": Option(0, at_least(0)),
        "compaction_enabled": Option(True),
        "compaction_threshold": Option(0.8, between(0.1, 1.0)),
        "compaction_min_messages": Option(20, at_least(2)),
        "compaction_keep_recent": Option(4, at_least(0)),
        "cleanup_after_days": Option(30, at_least(1)),
        "cleanup_delete": Option(False),
    },
    "llm": {
        "base_url": Option("", http_url_or_empty),
        "api_key": Option(""),
        "model": Option(""),
        "fast_model": Option(""),
        "context_window": Option(8192, at_least(512)),
        "request_timeout": Option(120.0, at_least(1)),
        "max_iterations": Option(10, at_least(1)),
        "max_answer_tokens": Option(2048, at_least(16)),
        # An OpenAI-compatible client's tools replace Neotask's own, unless this mixes them.
        "mix_client_tools": Option(False),
        # agent.model_files.LOCAL_MODEL_NAMES (config is loaded before the apps are)
        "local_model": Option(
            "qwen2.5-coder-0.5b", one_of("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "smollm2")
        ),
        "local_model_path": Option(""),
        "local_model_threads": Option(0, at_least(0)),
    },
    "terminal": {
        "enabled": Option(False),
        "timeout_seconds": Option(30.0, at_least(1)),
        "output_limit_bytes": Option(16384, at_least(256)),
        "approval_timeout_seconds": Option(300.0, at_least(1)),
        "sandbox": Option("bwrap", one_of("bwrap", "none")),
        "network": Option(False),
        "cpu_seconds": Option(30, at_least(1)),
        "memory_mb": Option(1024, at_least(64)),
        "file_size_mb": Option(100, at_least(1)),
        "max_processes": Option(32, at_least(8)),
        "tmp_size_mb": Option(64, at_least(1)),
        "workspace_mb": Option(1024, at_least(1)),
    },
    # Single sign-on with an OpenID Connect provider (docs/deploy.md); off while
    # `issuer` is empty.
    "oidc": {
        "issuer": Option("", http_url_or_blank),
        "client_id": Option(""),
        "client_secret": Option(""),
        "provider_name": Option("single sign-on", not_blank),
        "scopes": Option("openid email profile"),
        "username_claim": Option("preferred_username", not_blank),
        "groups_claim": Option("groups", not_blank),
        "allowed_groups": Option(""),
        "group_map": Option("", group_map_text),
        "link_existing_users": Option(False),
        "local_login": Option(True),
        "timeout_seconds": Option(10.0, at_least(1)),
    },
    # What URLs people set (MCP servers, model providers) may reach besides public
    # addresses (agent.outbound): addresses or networks, comma-separated; a
    # superuser's own URLs may reach private networks anyway.
    "network": {
        "allow_private": Option("", address_list),
    },
    "macros": {
        "hint_confidence": Option(0.7, between(0.0, 1.0)),
        "min_uses": Option(3, at_least(1)),
    },
    # Each user's limits (sessions_app.quotas), unless a group quota gives more; 0 = none.
    "quotas": {
        "messages_per_minute": Option(0, at_least(0)),
        "tokens_per_day": Option(0, at_least(0)),
        # Under a daily token limit, what each running turn holds of the day until it ends.
        "reserve_per_turn": Option(4000, at_least(1)),
    },
}

SCHEDULED_TASK_KEYS: dict[str, Option] = {
    "name": Option(""),
    "schedule": Option(""),
    "prompt": Option(""),
    "owner": Option(""),
    "agent": Option(DEFAULT_AGENT),
    "trusted": Option(False),
}
REQUIRED_TASK_KEYS = ("name", "schedule", "prompt", "owner")

TRUE_WORDS = {"1", "true", "yes", "on"}
FALSE_WORDS = {"0", "false", "no", "off"}


def env_name(section: str, key: str) -> str:
    return f"NEOTASK_{section}_{key}".upper()


def _type_name(kind: type) -> str:
    return {bool: "true or false", int: "a whole number", float: "a number", str: "a string"}[kind]


def _coerce(value: Any, option: Option, where: str) -> Any:
    """Check a TOML value against the option's type; ints are accepted as floats."""
    kind = option.type
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if type(value) is not kind:
        raise ConfigError(f"{where} must be {_type_name(kind)}, not {value!r}")
    if isinstance(value, float) and not math.isfinite(value):  # inf hours overflow every date sum
        raise ConfigError(f"{where} must be a finite number, not {value!r}")
    if option.check and (reason := option.check(value)):
        raise ConfigError(f"{where} {reason} (got {value!r})")
    return value


def _parse_env(raw: str, option: Option, where: str) -> Any:
    kind = option.type
    text = raw.strip()
    if kind is bool:
        if text.lower() in TRUE_WORDS:
            return _coerce(True, option, where)
        if text.lower() in FALSE_WORDS:
            return _coerce(False, option, where)
        raise ConfigError(f"{where} must be true or false, not {raw!r}")
    if kind in (int, float):
        try:
            number = kind(text)
        except ValueError:
            raise ConfigError(f"{where} must be {_type_name(kind)}, not {raw!r}") from None
        return _coerce(number, option, where)
    return _coerce(raw, option, where)


def _unknown(name: str, known: list[str], where: str) -> ConfigError:
    hint = difflib.get_close_matches(name, known, n=1)
    suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
    return ConfigError(f"{where}: unknown key {name!r}{suggestion}")


def read_toml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: config file not found (set NEOTASK_CONFIG to its path)"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read ({exc})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # The message carries the position, e.g. "(at line 3, column 7)".
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def _scheduled_tasks(raw: Any, source: str) -> list[dict[str, Any]]:
    if not isinstance(raw, list):
        raise ConfigError(
            f"{source}: scheduled_tasks must be written as [[scheduled_tasks]] tables"
        )
    tasks = []
    for number, entry in enumerate(raw, start=1):
        where = f"{source}: [[scheduled_tasks]] #{number}"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where} must be a table")
        for name in entry:
            if name not in SCHEDULED_TASK_KEYS:
                raise _unknown(name, list(SCHEDULED_TASK_KEYS), where)
        task = {
            name: _coerce(entry.get(name, option.default), option, f"{where} key {name!r}")
            for name, option in SCHEDULED_TASK_KEYS.items()
        }
        for name in REQUIRED_TASK_KEYS:
            if not task[name].strip():
                raise ConfigError(f"{where} needs a non-empty {name!r}")
        tasks.append(task)
    return tasks


def load_config(path: Path | None, environ: Mapping[str, str]) -> dict[str, Any]:
    """Defaults, then the TOML file (if any), then NEOTASK_<SECTION>_<KEY> variables."""
    document = read_toml(path) if path is not None else {}
    source = str(path)
    config: dict[str, Any] = {
        section: {key: option.default for key, option in options.items()}
        for section, options in SCHEMA.items()
    }
    origins: dict[str, str] = {}  # "section.key": where a value was set, for errors
    for section, values in document.items():
        if section == "scheduled_tasks":
            continue
        if section not in SCHEMA:
            raise _unknown(section, [*SCHEMA, "scheduled_tasks"], f"{source}: section")
        if not isinstance(values, dict):
            raise ConfigError(f"{source}: [{section}] must be a table of keys")
        for key, value in values.items():
            if key not in SCHEMA[section]:
                raise _unknown(key, list(SCHEMA[section]), f"{source}: [{section}]")
            where = origins[f"{section}.{key}"] = f"{source}: [{section}] {key}"
            config[section][key] = _coerce(value, SCHEMA[section][key], where)
    for section, options in SCHEMA.items():
        for key, option in options.items():
            variable = env_name(section, key)
            if variable in environ:
                config[section][key] = _parse_env(environ[variable], option, variable)
                origins[f"{section}.{key}"] = variable
    answer_tokens = origins.get("llm.max_answer_tokens", "[llm] max_answer_tokens")
    _check_answer_room(config["llm"], answer_tokens)
    _check_single_sign_on(config["oidc"], origins)
    config["scheduled_tasks"] = _scheduled_tasks(document.get("scheduled_tasks", []), source)
    return config


def _check_answer_room(llm: dict[str, Any], where: str) -> None:
    """The prompt is cut to leave room for the longest answer: half the window at most."""
    if llm["max_answer_tokens"] > llm["context_window"] // 2:
        raise ConfigError(
            f"{where} must be at most half of [llm] context_window "
            f"({llm['context_window'] // 2} of {llm['context_window']}), to leave room "
            f"for the prompt (got {llm['max_answer_tokens']})"
        )


def _check_single_sign_on(oidc: dict[str, Any], origins: dict[str, str]) -> None:
    """A provider needs its client's credentials and the openid scope; switching
    passwords off needs a provider, or nobody could sign in."""
    where = {key: origins.get(f"oidc.{key}", f"[oidc] {key}") for key in oidc}
    if oidc["issuer"]:
        for key in ("client_id", "client_secret"):
            if not oidc[key].strip():
                raise ConfigError(f"{where[key]} must be set when [oidc] issuer is set")
        if "openid" not in oidc["scopes"].split():
            raise ConfigError(f"{where['scopes']} must include 'openid' (got {oidc['scopes']!r})")
    elif not oidc["local_login"]:
        raise ConfigError(
            f"{where['local_login']} can be false only with an [oidc] issuer: "
            "otherwise nobody could sign in"
        )


def config_path(environ: Mapping[str, str], base_dir: Path) -> Path | None:
    """NEOTASK_CONFIG names the file ("" for none); else ./config.toml when it exists."""
    if "NEOTASK_CONFIG" in environ:
        value = environ["NEOTASK_CONFIG"].strip()
        return Path(value).expanduser() if value else None
    default = base_dir / "config.toml"
    return default if default.exists() else None
