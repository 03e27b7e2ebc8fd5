# The two commands of the README, and the checks CI runs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo serve test check lint screenshots

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.board: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[board]'
	touch $@

$(VENV)/.dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[board,dev]'
	touch $@

# `make demo PORT=8765` when 8000 is taken.
PORT ?= 8000

demo: $(VENV)/.board
	$(BIN)/gua-board demo --port $(PORT)

serve: $(VENV)/.board
	$(BIN)/gua-board serve

test: $(VENV)/.dev
	@bash tests/deps.sh
	$(BIN)/pytest -n 2

# Rewrites docs/screenshots/*.png from the browser tests (Debian's chromium).
screenshots: $(VENV)/.dev
	GUA_BOARD_SCREENSHOTS=1 $(BIN)/pytest tests/web/test_browser.py

lint: $(VENV)/.dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check board agent
	$(BIN)/mypy

check: lint test
