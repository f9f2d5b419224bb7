# Neotask: `make run` to use it, `make test` to check it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000

.PHONY: run test lint migrate clean

run: $(VENV)/.installed-run
	$(BIN)/python manage.py migrate --noinput
	NEOTASK_PORT=$(PORT) $(BIN)/python manage.py serve

test: $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

lint: $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

migrate: $(VENV)/.installed-run
	$(BIN)/python manage.py migrate --noinput

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
		|| { echo "Neotask needs Python 3.11 or newer: make PYTHON=python3.12 ..."; exit 1; }
	$(PYTHON) -m venv $(VENV)

# Reinstall only when pyproject.toml changed, so a second `make run` starts at once.
$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $@

clean:
	rm -rf $(VENV) *.egg-info
