"""The docs name only files and modules the project has: every ``ocr/``, ``runners/``, ``scripts/``,
``configs/`` and ``tests/`` path, every Python file named without its folder and every dotted ``ocr.``
name in README.md and docs/ exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers.paths import REPO_ROOT

DOCS = sorted([REPO_ROOT / "README.md", *(REPO_ROOT / "docs").rglob("*.md")])
# A path ends before a placeholder (`<name>`, `*`, `{a,b}`) or a Hydra override (`=`); its folder is checked.
PATH = re.compile(r"(?<![\w./-])((?:ocr|runners|scripts|configs|tests)/[\w./-]*)([<*{=]?)")
DOTTED = re.compile(r"(?<![\w./-])(ocr(?:\.\w+)+)")
BARE = re.compile(r"(?<![\w./-])(\w+\.py)\b")  # a file named without its folder, e.g. in a table row
PY_FILES = {
    path.name
    for folder in ("ocr", "runners", "scripts", "tests")
    for path in (REPO_ROOT / folder).rglob("*.py")
}


def _named_paths(text: str) -> set[str]:
    named = set()
    for path, placeholder in PATH.findall(text):
        path = path.rstrip(".")
        named.add(path.rsplit("/", 1)[0] + "/" if placeholder and not path.endswith("/") else path)
    return named


def _module_of(dotted: str) -> tuple[Path, list[str]] | None:
    """The longest module prefix of ``dotted`` as a file, and the names after it."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        base = REPO_ROOT.joinpath(*parts[:end])
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate, parts[end:]
    return None


def _missing_dotted(dotted: str) -> str | None:
    found = _module_of(dotted)
    if found is None:
        return "no such module"
    module, rest = found
    if rest and not re.search(
        rf"^(?:class|def) {rest[0]}\b|^{rest[0]}\b.*=|import .*\b{rest[0]}\b", module.read_text(), re.M
    ):
        return f"{module.relative_to(REPO_ROOT)} defines no {rest[0]!r}"
    return None


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_every_named_path_and_module_exists(doc: Path) -> None:
    text = doc.read_text()
    missing = [path for path in sorted(_named_paths(text)) if not (REPO_ROOT / path).exists()]
    missing += [f"{name} (no such file)" for name in sorted(set(BARE.findall(text)) - PY_FILES)]
    for dotted in sorted(set(DOTTED.findall(text))):
        reason = _missing_dotted(dotted.rstrip("."))
        if reason:
            missing.append(f"{dotted} ({reason})")
    assert not missing, f"{doc.relative_to(REPO_ROOT)} names what the repository does not have: {missing}"


def test_the_checks_see_a_missing_path_and_module() -> None:
    assert _named_paths("see `ocr/data/nosuch.py` and configs/experiment/<name>.yaml") == {
        "ocr/data/nosuch.py",
        "configs/experiment/",
    }
    assert _missing_dotted("ocr.nosuch") == "ocr/__init__.py defines no 'nosuch'"
    assert _missing_dotted("nosuch.module") == "no such module"
    assert _missing_dotted("ocr.geometry.nosuch") == "ocr/geometry.py defines no 'nosuch'"
    assert _missing_dotted("ocr.geometry.to_original") is None
    assert set(BARE.findall("helpers in `target_geometry.py` and `db.py`")) - PY_FILES == {
        "target_geometry.py"
    }
