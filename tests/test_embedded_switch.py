"""`manage.py local_llm` for real (issue 42): after loading a model it puts the
fixed prefix every turn starts with (instructions, tool schemas) into llama.cpp's
prompt cache — evaluated once and saved, restored at the next start — and it
loads another embedded model when a turn asks, with one model in memory at a
time. SmolLM2-135M (bundled); the switch also needs the fetched Qwen 0.5B
(NEOTASK_TEST_MODELS_DIR, as tests/e2e/test_default_model_e2e.py)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from asgiref.sync import async_to_sync

from agent import local_model
from agent.prompt import fixed_prefix
from tests.support.processes import ROOT, app_env, stop_process

pytestmark = pytest.mark.slow

KEY = "local-switch-test-key-0123"
MODELS = os.environ.get("NEOTASK_TEST_MODELS_DIR", "")
QWEN = "qwen2.5-coder-0.5b"


@contextlib.contextmanager
def model_server(data: Path, model: str) -> Iterator[subprocess.Popen]:
    env = app_env(data, NEOTASK_LOCAL_LLM_KEY=KEY, NEOTASK_LLM_LOCAL_MODEL=model)
    env.pop("NEOTASK_LLM_BASE_URL", None)
    process = subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "local_llm",
            "--address-file",
            str(data / "local_llm.address"),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    try:
        ready(data, process)
        yield process
    finally:
        stop_process(process)


def ready(data: Path, process: subprocess.Popen, seconds: float = 240) -> str:
    """The address once the server serves and its prefix is warm."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and process.poll() is None:
        address = read_address(data)
        if address and not (data / "local_llm.warming").exists():
            return address.split("\n")[0]
        time.sleep(0.1)
    raise AssertionError("the model server did not get ready")


def read_address(data: Path) -> str:
    with contextlib.suppress(OSError):
        return (data / "local_llm.address").read_text().split("\n")[0]
    return ""


def turn_like(address: str) -> dict:
    """A chat's first turn's prompt: the fixed prefix, then what changes (time,
    facts), then the message; what llama.cpp evaluated (prompt_n) and took from
    its cache (cache_n)."""
    messages, tools = fixed_prefix()
    body = {
        "messages": [
            *messages,
            {"role": "system", "content": "The current date and time is Monday 09:41."},
            {"role": "user", "content": "What is the capital of Portugal?"},
        ],
        "tools": tools,
        "max_tokens": 1,
    }
    response = httpx.post(
        f"{address}/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=240,
    )
    response.raise_for_status()
    return response.json()["timings"]


def test_the_fixed_prefix_is_warm_after_a_load_and_after_a_restart(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    with model_server(data, "smollm2"):
        warm = turn_like(read_address(data))
    # The first turn's prompt found the instructions in the cache, only the rest evaluated.
    assert warm["cache_n"] > warm["prompt_n"], warm
    [saved] = (data / "local_llm.prefix").glob("smollm2-*.bin")
    written = saved.stat().st_mtime_ns

    with model_server(data, "smollm2"):
        restarted = turn_like(read_address(data))
    assert restarted["cache_n"] == warm["cache_n"], restarted
    assert saved.stat().st_mtime_ns == written  # restored, not evaluated and saved again

    # Without the warm-up (as before): nothing in the cache.
    env = app_env(data, NEOTASK_LOCAL_LLM_KEY=KEY, NEOTASK_LLM_LOCAL_MODEL="smollm2")
    process = subprocess.Popen(
        [sys.executable, "manage.py", "local_llm", "--no-warm"], cwd=ROOT, env=env
    )
    try:
        assert turn_like(ready(data, process))["cache_n"] == 0
    finally:
        stop_process(process)


def test_prepare_saves_the_prefix_so_the_first_start_only_restores_it(tmp_path):
    """`make run` runs `local_llm --prepare` before it serves: the first start of a new
    data dir then finds the prefix saved, as any later start does."""
    data = tmp_path / "data"
    data.mkdir()
    env = app_env(data, NEOTASK_LLM_LOCAL_MODEL="smollm2")
    env.pop("NEOTASK_LLM_BASE_URL", None)
    prepare = [sys.executable, "manage.py", "local_llm", "--prepare"]
    done = subprocess.run(prepare, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert "Prepared in" in done.stdout
    [saved] = (data / "local_llm.prefix").glob("smollm2-*.bin")
    written = saved.stat().st_mtime_ns
    assert not (data / "local_llm.address").exists()  # its server was published nowhere

    with model_server(data, "smollm2"):
        first = turn_like(read_address(data))
    assert first["cache_n"] > first["prompt_n"], first
    assert saved.stat().st_mtime_ns == written  # restored, not evaluated again

    again = subprocess.run(prepare, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "is ready" in again.stdout, again.stdout

    # With a configured server there is no embedded model to prepare.
    remote = {**env, "NEOTASK_LLM_BASE_URL": "http://127.0.0.1:9/v1"}
    other = tmp_path / "other"
    other.mkdir()
    remote["NEOTASK_DATA_DIR"] = str(other)
    skipped = subprocess.run(
        prepare, cwd=ROOT, env=remote, capture_output=True, text=True, timeout=60
    )
    assert skipped.returncode == 0 and not (other / "local_llm.prefix").exists()


def mapped_models(pid: int) -> set[str]:
    maps = (Path("/proc") / str(pid) / "maps").read_text()
    return {line.rsplit("/", 1)[-1] for line in maps.splitlines() if line.endswith(".gguf")}


@pytest.mark.skipif(not MODELS, reason="NEOTASK_TEST_MODELS_DIR is not set (make test fetches it)")
def test_a_turn_asking_for_another_model_has_it_loaded_in_place_of_the_first(tmp_path, settings):
    data = tmp_path / "data"
    data.mkdir()
    (data / "models").symlink_to(Path(MODELS).resolve())
    settings.DATA_DIR = data  # this process asks as a turn would

    async def ask(name: str) -> str:
        async with local_model.serving(name) as address:
            return address

    with model_server(data, QWEN) as server:
        assert mapped_models(server.pid) == {f"{QWEN}.gguf"}
        address = async_to_sync(ask)("smollm2")
        assert local_model.served() == (address, "smollm2")
        # One model in memory: Qwen's file is no longer mapped, SmolLM2's is.
        assert mapped_models(server.pid) == {local_model.BUNDLED_FILE}
        assert turn_like(address)["cache_n"] > 0  # warm after the switch too
        address = async_to_sync(ask)(QWEN)
        assert mapped_models(server.pid) == {f"{QWEN}.gguf"}
        assert local_model.served() == (address, QWEN)
