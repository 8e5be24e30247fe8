"""The docs name only files and modules the project has (every ``ocr/``, ``runners/``, ``scripts/``,
``configs/`` and ``tests/`` path, every Python file named without its folder and every dotted ``ocr.``
name in README.md and docs/ exists), their links resolve, every runner command they show composes, no
heading names a session, a turn or a date, and docs/results.md is what its data render."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest
from omegaconf import DictConfig

from tests.helpers.paths import REPO_ROOT
from tests.helpers.scripts import load_script

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


FENCE = re.compile(r"^```")
LINK = re.compile(r"\]\(([^)\s]+)\)")
RUNNER_COMMAND = re.compile(r"^uv run runners/(\w+)\.py\b(.*)$")
# A heading that dates its section: a session, a turn, a year, an ISO date or a month.
DATED = re.compile(
    r"\b(?:sessions?|turns?|\d{4}-\d{2}-\d{2}|(?:19|20)\d{2}|January|February|March|April|May|June|July|"
    r"August|September|October|November|December)\b",
    re.IGNORECASE,
)


def _split_code(text: str) -> tuple[list[str], list[str]]:
    """The lines of ``text`` outside fenced code blocks, and those inside them."""
    prose: list[str] = []
    code: list[str] = []
    inside = False
    for line in text.splitlines():
        if FENCE.match(line):
            inside = not inside
        else:
            (code if inside else prose).append(line)
    return prose, code


def _runner_commands(code: list[str]) -> list[tuple[str, list[str]]]:
    """``uv run runners/<name>.py`` commands (continuation lines joined) as (runner, overrides): optional
    ``[key=value ...]`` given, a sweep's first value, placeholders ``<...>`` as a plain word."""
    joined = re.sub(r"\\\n\s*", " ", "\n".join(code))
    commands = []
    for line in joined.splitlines():
        found = RUNNER_COMMAND.match(line.strip())
        if not found:
            continue
        args = shlex.split(re.sub(r"<[^<>]*>", "x", found.group(2)), comments=True)
        args = [_unbracket(a) for a in args]
        overrides = [a if "[" in a else re.sub(r"=([^,]*),.*", r"=\1", a) for a in args if a != "-m"]
        commands.append((found.group(1), overrides))
    return commands


def _unbracket(arg: str) -> str:
    """An ``[optional]`` argument as given (a list value such as ``key=[a,b]`` keeps its brackets)."""
    arg = arg.removeprefix("[")
    return arg[:-1] if arg.endswith("]") and "[" not in arg else arg


def _dated_headings(text: str) -> list[str]:
    prose, _ = _split_code(text)
    return [line for line in prose if line.startswith("#") and DATED.search(line)]


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_every_link_resolves(doc: Path) -> None:
    prose, _ = _split_code(doc.read_text())
    targets = {t.split("#")[0] for t in LINK.findall("\n".join(prose)) if not re.match(r"\w+:|#", t)}
    missing = sorted(t for t in targets if not (doc.parent / t).exists())
    assert not missing, f"{doc.relative_to(REPO_ROOT)} links to files that do not exist: {missing}"


@pytest.mark.parametrize(
    "doc",
    [d for d in DOCS if d.name != "results.md"],  # results.md records the commands that ran
    ids=lambda path: str(path.relative_to(REPO_ROOT)),
)
def test_every_runner_command_composes(
    doc: Path, compose_cfg: Callable[[str, list[str], Path], DictConfig], tmp_path: Path
) -> None:
    for runner, overrides in _runner_commands(_split_code(doc.read_text())[1]):
        compose_cfg(runner, overrides, tmp_path)


def test_the_readme_shows_every_runner() -> None:
    shown = {runner for runner, _ in _runner_commands(_split_code((REPO_ROOT / "README.md").read_text())[1])}
    assert shown == {path.stem for path in (REPO_ROOT / "runners").glob("*.py")}


def test_the_command_reader_takes_a_sweep_and_a_continued_line() -> None:
    code = ["uv run runners/test.py -m ckpt=<run>/last.ckpt \\", "    postprocess.thresh=0.2,0.3  # a sweep"]
    code += ["uv run runners/serve.py [ckpt2=<other>] [split=test port=1] 'data.extra_train_roots=[a,b]'"]
    assert _runner_commands(code) == [
        ("test", ["ckpt=x/last.ckpt", "postprocess.thresh=0.2"]),
        ("serve", ["ckpt2=x", "split=test", "port=1", "data.extra_train_roots=[a,b]"]),
    ]


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_no_heading_names_a_session_a_turn_or_a_date(doc: Path) -> None:
    assert not _dated_headings(doc.read_text()), doc.relative_to(REPO_ROOT)


def test_the_heading_rule_sees_a_dated_heading() -> None:
    text = "## On the CPU (2026-11-23)\n### Fifth session\n```\n# 2026 in a comment\n```\n## Data wait\n"
    assert _dated_headings(text) == ["## On the CPU (2026-11-23)", "### Fifth session"]


def test_the_results_page_is_what_its_data_render() -> None:
    page = load_script("results_page")
    assert (REPO_ROOT / "docs" / "results.md").read_text() == page.render(), (
        "docs/results.md is not what docs/results/*.json render: run uv run python scripts/results_page.py"
    )
