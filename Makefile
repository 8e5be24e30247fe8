.PHONY: help format lint test train

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "%-8s %s\n", $$1, $$2}'

format: ## ruff format + autofix
	uv run ruff format . && uv run ruff check --fix .

lint: ## ruff checks and the type check (mypy over ocr/ and runners/)
	uv run ruff check . && uv run ruff format --check ocr runners scripts && uv run mypy

test: ## the test suite (what CI runs)
	uv run pytest

train: ## default training run on the synthetic receipts
	uv run runners/train.py
