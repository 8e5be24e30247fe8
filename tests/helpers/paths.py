"""Where the repository is, for tests that read configs, run scripts or find the shared data."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
