"""Bad config.toml values, for every key of every section: start-up stops with one
line naming the file, the key (or variable) and what is wrong.

The cases are derived from core.config.SCHEMA, so a new key is covered
as soon as it exists; tests/test_config.py holds the hand-written examples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.config import (
    SCHEDULED_TASK_KEYS,
    SCHEMA,
    ConfigError,
    Option,
    env_name,
    load_config,
)
from scheduler.config_sync import SyncError, sync_config_tasks
from scheduler.models import ScheduledTask
from tests.support.files import write_config

KEYS = [
    (section, key, option) for section, options in SCHEMA.items() for key, option in options.items()
]
# A value of another type for each option type, as TOML source.
WRONG_TYPE_TOML = {bool: '"yes"', int: '"ten"', float: '"ten"', str: "5"}
WRONG_TYPE_ENV = {bool: "maybe", int: "1.5", float: "ten"}
# Values of the right type that some check refuses; the first one refused is used.
OUT_OF_RANGE: dict[type, list[Any]] = {
    int: [-1, -(10**6), 10**6],
    float: [-1.0, -1000.0, 1000.0],
    str: ["", "no such thing", "ftp://example.org", "Nowhere/Atlantis"],
}


def toml_value(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    return str(value).lower() if isinstance(value, bool) else repr(value)


def refused_value(option: Option) -> Any:
    assert option.check is not None
    return next(v for v in OUT_OF_RANGE[option.type] if option.check(v))


def config_error(path: Path | None, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path, environ or {})
    message = str(info.value)
    assert "\n" not in message, "start-up errors are one line"
    return message


def key_id(case: tuple[str, str, Option]) -> str:
    return f"{case[0]}.{case[1]}"


@pytest.mark.parametrize("case", KEYS, ids=key_id)
def test_it_names_a_key_of_the_wrong_type(tmp_path, case):
    section, key, option = case
    path = write_config(tmp_path, f"[{section}]\n{key} = {WRONG_TYPE_TOML[option.type]}\n")
    message = config_error(path)
    assert message.startswith(f"{path}: [{section}] {key} must be ")


@pytest.mark.parametrize("case", [c for c in KEYS if c[2].type is int], ids=key_id)
def test_it_refuses_a_fraction_for_a_whole_number(tmp_path, case):
    section, key, _ = case
    message = config_error(write_config(tmp_path, f"[{section}]\n{key} = 2.5\n"))
    assert f"[{section}] {key} must be a whole number, not 2.5" in message


@pytest.mark.parametrize("case", [c for c in KEYS if c[2].check is not None], ids=key_id)
def test_it_names_a_key_out_of_range(tmp_path, case):
    section, key, option = case
    value = refused_value(option)
    message = config_error(write_config(tmp_path, f"[{section}]\n{key} = {toml_value(value)}\n"))
    assert f"[{section}] {key} " in message
    assert option.check(value) in message  # the reason, e.g. "must be at least 1"


@pytest.mark.parametrize("case", [c for c in KEYS if c[2].type is float], ids=key_id)
@pytest.mark.parametrize("value", ["inf", "-inf", "nan"])
def test_it_refuses_infinite_and_nan_numbers(tmp_path, case, value):
    # An infinite interval passed "at least 0.1" and then crashed migrate (OverflowError).
    section, key, _ = case
    message = config_error(write_config(tmp_path, f"[{section}]\n{key} = {value}\n"))
    assert f"[{section}] {key} must be a finite number" in message
    variable = env_name(section, key)
    assert f"{variable} must be a finite number" in config_error(None, {variable: value})


@pytest.mark.parametrize("case", [c for c in KEYS if c[2].type is not str], ids=key_id)
def test_it_names_an_environment_variable_of_the_wrong_type(case):
    section, key, option = case
    variable = env_name(section, key)
    message = config_error(None, {variable: WRONG_TYPE_ENV[option.type]})
    assert message.startswith(f"{variable} must be ")


@pytest.mark.parametrize("case", [c for c in KEYS if c[2].check is not None], ids=key_id)
def test_it_names_an_environment_variable_out_of_range(case):
    section, key, option = case
    value = refused_value(option)
    variable = env_name(section, key)
    message = config_error(None, {variable: str(value)})
    assert message.startswith(f"{variable} ") and option.check(value) in message


@pytest.mark.parametrize("section", SCHEMA)
def test_it_names_an_unknown_key_in_every_section(tmp_path, section):
    path = write_config(tmp_path, f"[{section}]\nno_such_key = 1\n")
    assert f"[{section}]: unknown key 'no_such_key'" in config_error(path)


@pytest.mark.parametrize("section", SCHEMA)
def test_it_refuses_a_section_that_is_not_a_table(tmp_path, section):
    path = write_config(tmp_path, f"{section} = [1, 2]\n")
    assert f"[{section}] must be a table of keys" in config_error(path)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ('[llm]\nmodel = "unterminated\n', 2),
        ("[memory]\nrecency_limit = 3\nrecency_limit = 4\n", 3),
        ("[memory]\nrecency_limit =\n", 2),
        ("[memory\nrecency_limit = 3\n", 1),
        ('[llm]\nmodel = "bad \\q escape"\n', 2),
        ("[memory]\n[memory]\n", 2),
        ("[sessions]\ndaily_reset_hour = 0x\n", 2),
    ],
)
def test_it_names_the_line_of_bad_toml(tmp_path, text, line):
    message = config_error(write_config(tmp_path, text))
    assert "not valid TOML" in message and f"line {line}" in message


def test_it_refuses_a_file_that_is_not_utf8(tmp_path):
    path = write_config(tmp_path, b'[llm]\nmodel = "caf\xe9"\n')
    assert f"{path}: cannot be read" in config_error(path)


def test_it_refuses_a_directory_as_the_config_file(tmp_path):
    assert f"{tmp_path}: cannot be read" in config_error(tmp_path)


TASK = {"name": "Brief", "schedule": "daily at 9am", "prompt": "Summarise", "owner": "alice"}


def task_toml(**fields: Any) -> str:
    entry = {**TASK, **fields}
    lines = [f"{name} = {value}" for name, value in entry.items()]
    return "[[scheduled_tasks]]\n" + "\n".join(lines) + "\n"


@pytest.mark.parametrize("key", SCHEDULED_TASK_KEYS)
def test_it_names_a_task_key_of_the_wrong_type(tmp_path, key):
    wrong = WRONG_TYPE_TOML[SCHEDULED_TASK_KEYS[key].type]
    quoted = {name: f'"{value}"' for name, value in TASK.items()}
    message = config_error(write_config(tmp_path, task_toml(**{**quoted, key: wrong})))
    assert f"[[scheduled_tasks]] #1 key {key!r} must be " in message


@pytest.mark.parametrize("key", ["name", "schedule", "prompt", "owner"])
def test_it_names_an_empty_required_task_key(tmp_path, key):
    quoted = {name: f'"{value}"' for name, value in TASK.items()}
    message = config_error(write_config(tmp_path, task_toml(**{**quoted, key: '"  "'})))
    assert f"needs a non-empty {key!r}" in message


@pytest.mark.parametrize(
    "text",
    ["scheduled_tasks = [1, 2]\n", 'scheduled_tasks = ["daily"]\n'],
)
def test_it_refuses_task_entries_that_are_not_tables(tmp_path, text):
    assert "[[scheduled_tasks]] #1 must be a table" in config_error(write_config(tmp_path, text))


@pytest.mark.parametrize(
    ("schedule", "reason"),
    [
        ("61 * * * *", "is not a valid cron expression"),
        ("0 25 * * *", "is not a valid cron expression"),
        ("0 9 * * 8", "is not a valid cron expression"),
        ("0 9 32 * *", "is not a valid cron expression"),
        ("0 9 * 13 *", "is not a valid cron expression"),
        ("*/0 * * * *", "is not a valid cron expression"),
        ("* * * *", "has 4 fields, but a cron expression needs exactly 5"),
        ("0 9 * * 1-5 2026", "has 6 fields"),
        ("0 9 * * 1; rm -rf /", "has 8 fields"),
        ("0 0 31 2 *", "never runs"),
        ("every 0 minutes", "the interval must be at least 1 minute"),
        ("daily at 25:00", "is not a valid time"),
    ],
)
def test_it_applies_nothing_from_a_task_with_a_bad_schedule(alice, schedule, reason):
    sync_config_tasks([{**TASK, "name": "Kept", "agent": "main", "trusted": False}])
    bad = {**TASK, "name": "Bad", "schedule": schedule, "agent": "main", "trusted": False}
    with pytest.raises(SyncError) as info:
        sync_config_tasks([{**TASK, "agent": "main", "trusted": False}, bad])
    message = str(info.value)
    assert message.startswith('[[scheduled_tasks]] #2 "Bad": ') and "\n" not in message
    assert reason in message
    assert list(ScheduledTask.objects.values_list("name", flat=True)) == ["Kept"]
