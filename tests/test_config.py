from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from core import profiles
from core.config import SCHEMA, ConfigError, config_path, load_config
from tests.support.files import write_config
from tests.support.processes import ROOT


def test_it_uses_the_documented_defaults():
    config = load_config(None, {})
    assert config["memory"]["working_memory_cap"] == 50
    assert config["memory"]["consolidation_interval_hours"] == 6
    assert config["memory"]["recency_limit"] == 10
    assert config["memory"]["relevance_limit"] == 5
    assert config["memory"]["relevance_min_importance"] == 0.8
    assert config["memory"]["similarity_limit"] == 5
    assert config["memory"]["similarity_threshold"] == 0.65
    assert config["sessions"]["daily_reset_hour"] == 4
    assert config["sessions"]["compaction_threshold"] == 0.8
    assert config["sessions"]["cleanup_after_days"] == 30
    assert config["llm"]["base_url"] == ""
    assert config["scheduled_tasks"] == []


def test_it_documents_every_key_with_its_default_in_the_example():
    example = ROOT / "config.example.toml"
    assert load_config(example, {}) == load_config(None, {})
    text = example.read_text()
    for section, options in SCHEMA.items():
        assert f"[{section}]" in text
        for key in options:
            assert f"\n{key} = " in text, f"{section}.{key} is not documented"


def test_it_reads_values_from_the_file(tmp_path):
    path = write_config(
        tmp_path, '[memory]\nworking_memory_cap = 80\n[llm]\nbase_url = "http://x/v1"\n'
    )
    config = load_config(path, {})
    assert config["memory"]["working_memory_cap"] == 80
    assert config["llm"]["base_url"] == "http://x/v1"


def test_it_lets_environment_variables_win(tmp_path):
    path = write_config(tmp_path, "[llm]\ncontext_window = 4096\n")
    env = {
        "NEOTASK_LLM_CONTEXT_WINDOW": "32768",
        "NEOTASK_LLM_BASE_URL": "https://api.example.org/v1",
        "NEOTASK_LLM_MODEL": "gpt-x",
        "NEOTASK_TERMINAL_ENABLED": "yes",
        "NEOTASK_MEMORY_SIMILARITY_THRESHOLD": "0.7",
    }
    config = load_config(path, env)
    assert config["llm"]["context_window"] == 32768
    assert config["llm"]["base_url"] == "https://api.example.org/v1"
    assert config["llm"]["model"] == "gpt-x"
    assert config["terminal"]["enabled"] is True
    assert config["memory"]["similarity_threshold"] == 0.7


def test_it_accepts_whole_numbers_for_float_keys(tmp_path):
    path = write_config(tmp_path, "[memory]\nconsolidation_interval_hours = 12\n")
    assert load_config(path, {})["memory"]["consolidation_interval_hours"] == 12.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[memory]\nworking_memory_cap = 0\n", "[memory] working_memory_cap must be at least 1"),
        ('[memory]\nworking_memory_cap = "lots"\n', "working_memory_cap must be a whole number"),
        ("[sessions]\ndaily_reset_hour = 25\n", "daily_reset_hour must be between 0 and 23"),
        ("[llm]\nlocal_model_threads = -1\n", "[llm] local_model_threads must be at least 0"),
        ('[llm]\nlocal_model_threads = "all"\n', "local_model_threads must be a whole number"),
        ("[memory]\nsimilarity_threshold = 2.0\n", "similarity_threshold must be between"),
        (
            '[memory]\nvector_backend = "faiss"\n',
            "vector_backend must be one of 'numpy', 'lancedb'",
        ),
        ('[llm]\nbase_url = "localhost:11434"\n', "base_url must be an http:// or https:// URL"),
        ('[server]\ntime_zone = "Mars/Olympus"\n', "'Mars/Olympus' is not a known time zone"),
        ('[server]\nlog_format = "xml"\n', "log_format must be one of 'plain', 'json'"),
        ('[server]\nmetrics_token = "secret"\n', "metrics_token must be empty (no metrics) or"),
        ("[sessions]\ncompaction_enabled = 1\n", "compaction_enabled must be true or false"),
        (
            "[memory]\nworking_memroy_cap = 5\n",
            "unknown key 'working_memroy_cap' (did you mean 'working_memory_cap'?)",
        ),
        ("[memroy]\nx = 1\n", "unknown key 'memroy' (did you mean 'memory'?)"),
        ('memory = "yes"\n', "[memory] must be a table of keys"),
        (
            '[[scheduled_tasks]]\nname = "x"\nprompt = "p"\nowner = "a"\n',
            "needs a non-empty 'schedule'",
        ),
        (
            '[[scheduled_tasks]]\nname = "x"\nschedule = "daily"\nprompt = "p"\nowner = "a"\n'
            "when = 1\n",
            "#1: unknown key 'when'",
        ),
        ("scheduled_tasks = 3\n", "must be written as [[scheduled_tasks]] tables"),
    ],
)
def test_it_names_the_bad_key_and_why(tmp_path, text, message):
    path = write_config(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path, {})
    assert message in str(info.value)
    assert str(path) in str(info.value)


def test_it_names_the_line_of_malformed_toml(tmp_path):
    path = write_config(tmp_path, "[memory]\nworking_memory_cap = 50\nrecency_limit = = 3\n")
    with pytest.raises(ConfigError, match=r"not valid TOML: .*line 3"):
        load_config(path, {})


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("NEOTASK_LLM_CONTEXT_WINDOW", "big", "NEOTASK_LLM_CONTEXT_WINDOW must be a whole number"),
        ("NEOTASK_LLM_CONTEXT_WINDOW", "100", "NEOTASK_LLM_CONTEXT_WINDOW must be at least 512"),
        (
            "NEOTASK_LLM_LOCAL_MODEL_THREADS",
            "two",
            "NEOTASK_LLM_LOCAL_MODEL_THREADS must be a whole number",
        ),
        ("NEOTASK_TERMINAL_ENABLED", "maybe", "NEOTASK_TERMINAL_ENABLED must be true or false"),
        ("NEOTASK_LLM_BASE_URL", "ftp://x", "NEOTASK_LLM_BASE_URL must be an http"),
        ("NEOTASK_SERVER_LOG_FORMAT", "JSON ", "NEOTASK_SERVER_LOG_FORMAT must be one of"),
        ("NEOTASK_SERVER_METRICS_TOKEN", "short", "at least 24 characters"),
    ],
)
def test_it_names_the_bad_environment_variable(variable, value, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, {variable: value})


def test_it_reads_scheduled_tasks(tmp_path):
    path = write_config(
        tmp_path,
        '[[scheduled_tasks]]\nname = "Brief"\nschedule = "weekdays at 9am"\n'
        'prompt = "Summarise"\nowner = "alice"\ntrusted = true\n',
    )
    [task] = load_config(path, {})["scheduled_tasks"]
    assert task == {
        "name": "Brief",
        "schedule": "weekdays at 9am",
        "prompt": "Summarise",
        "owner": "alice",
        "agent": "main",
        "trusted": True,
    }


def test_it_finds_the_config_file(tmp_path):
    assert config_path({}, tmp_path) is None
    (tmp_path / "config.toml").write_text("")
    assert config_path({}, tmp_path) == tmp_path / "config.toml"
    assert config_path({"NEOTASK_CONFIG": ""}, tmp_path) is None
    assert config_path({"NEOTASK_CONFIG": "/etc/nt.toml"}, tmp_path) == Path("/etc/nt.toml")


def test_it_reports_a_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.toml", {})


@pytest.mark.slow
def test_it_stops_start_up_with_one_line_and_no_traceback(tmp_path):
    path = write_config(tmp_path, "[sessions]\ndaily_reset_hour = 99\n")
    env = {**os.environ, "NEOTASK_CONFIG": str(path), "NEOTASK_DATA_DIR": str(tmp_path / "data")}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        f"neotask: configuration error: {path}: [sessions] daily_reset_hour must be between "
        "0 and 23 (got 99)"
    ]


def test_it_generates_the_secret_key_once(tmp_path):
    first = profiles.secret_key(None, tmp_path)
    assert len(first) >= 50
    assert profiles.secret_key(None, tmp_path) == first
    assert (tmp_path / "secret_key").stat().st_mode & 0o777 == 0o600
    assert profiles.secret_key("given-by-env", tmp_path) == "given-by-env"
    other = tmp_path / "other"
    other.mkdir()
    assert profiles.secret_key(None, other) != first


def test_it_keeps_no_secret_key_in_the_repository():
    settings_source = (ROOT / "neotask_site" / "settings.py").read_text()
    assert "SECRET_KEY = profiles.secret_key(" in settings_source
    assert "django-insecure" not in settings_source


def test_it_uses_sqlite_in_the_data_dir_without_database_url(tmp_path):
    config = profiles.databases(None, tmp_path)["default"]
    assert config["ENGINE"] == "django.db.backends.sqlite3"
    assert config["NAME"] == tmp_path / "neotask.sqlite3"
    assert config["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
    assert config["OPTIONS"]["timeout"] >= 5


def test_it_switches_to_postgresql_with_database_url(tmp_path):
    config = profiles.databases("postgresql://postgres@127.0.0.1:5432/neotask", tmp_path)
    assert config["default"]["ENGINE"] == "core.postgresql"  # Django's, checked less often
    assert config["default"]["NAME"] == "neotask"
    assert config["default"]["HOST"] == "127.0.0.1"


@pytest.mark.parametrize(
    "url", ["mysql://root@localhost/x", "postgresql://postgres@127.0.0.1:5432", "nonsense"]
)
def test_it_rejects_a_bad_database_url(tmp_path, url):
    with pytest.raises(ConfigError, match="DATABASE_URL"):
        profiles.databases(url, tmp_path)


def test_it_switches_layer_and_broker_to_redis_with_redis_url():
    assert profiles.channel_layers(None)["default"]["BACKEND"].endswith("InMemoryChannelLayer")
    assert profiles.q_cluster(None, 2)["orm"] == "default"
    url = "redis://127.0.0.1:6379/0"
    layer = profiles.channel_layers(url)["default"]
    assert layer["BACKEND"] == "core.channel_layer.RedisChannelLayer"
    assert layer["CONFIG"]["hosts"] == [url]
    cluster = profiles.q_cluster(url, 2)
    assert cluster["redis"] == url
    assert "orm" not in cluster


def test_it_rejects_a_bad_redis_url():
    with pytest.raises(ConfigError, match="REDIS_URL"):
        profiles.channel_layers("localhost:6379")


def test_it_rejects_a_data_dir_it_cannot_create(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="NEOTASK_DATA_DIR: cannot create"):
        profiles.data_dir(str(blocker / "sub"), tmp_path)


def test_the_default_data_dir_is_var_in_a_checkout_and_the_users_folder_for_a_wheel(
    tmp_path, monkeypatch
):
    checkout, site_packages = tmp_path / "checkout", tmp_path / "site-packages"
    for folder in (checkout, site_packages):
        folder.mkdir()
    (checkout / "manage.py").write_text("")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert profiles.data_dir(None, checkout) == checkout / "var"
    assert profiles.data_dir(None, site_packages) == tmp_path / "xdg" / "neotask"
    assert not (site_packages / "var").exists()
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert profiles.default_data_dir(site_packages) == tmp_path / "home/.local/share/neotask"


def test_it_rejects_a_bad_boolean_variable():
    with pytest.raises(ConfigError, match="NEOTASK_DEBUG must be true or false"):
        profiles.env_bool({"NEOTASK_DEBUG": "sure"}, "NEOTASK_DEBUG", False)


@pytest.mark.slow
def test_it_passes_the_deployment_checklist_with_the_documented_settings(tmp_path):
    env = {
        **os.environ,
        "NEOTASK_DATA_DIR": str(tmp_path),
        "NEOTASK_CONFIG": "",
        "NEOTASK_HTTPS": "true",
        "NEOTASK_ALLOWED_HOSTS": "neotask.example.org",
        "NEOTASK_CSRF_TRUSTED_ORIGINS": "https://neotask.example.org",
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    command = [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout
    # Without HTTPS the checklist names what is missing.
    env.pop("NEOTASK_HTTPS")
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode != 0
    assert "SECURE_HSTS_SECONDS" in result.stderr + result.stdout


@pytest.mark.slow
def test_it_runs_numpys_blas_in_one_thread(tmp_path):
    """OpenBLAS's other threads spin while they wait for a core: on two cores shared
    with the other workers, they doubled get_context's CPU time."""
    env = {**os.environ, "NEOTASK_DATA_DIR": str(tmp_path), "NEOTASK_CONFIG": ""}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.pop("OPENBLAS_NUM_THREADS", None)
    code = (  # the pool starts with the first product
        "import os, numpy; numpy.ones((500, 384)) @ numpy.ones(384); "
        "print(len(os.listdir('/proc/self/task')))"
    )

    def threads(**variables: str) -> int:
        command = [sys.executable, "manage.py", "shell", "--no-imports", "-c", code]
        result = subprocess.run(
            command, cwd=ROOT, env={**env, **variables}, capture_output=True, text=True, check=True
        )
        return int(result.stdout)

    assert threads() == threads(OPENBLAS_NUM_THREADS="1")
