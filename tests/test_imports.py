"""Import rules of the package: no cycle, each package imports only from lower floors (docs/architecture.md,
"Floors"), the debugging tools (ocr/debug, ocr/doctor) on top where nothing imports them; and importing the
package does not import wandb (slow, and it can hang start-up).

The rules read every import statement of ``ocr/`` with ``ast``, those inside functions and under
``TYPE_CHECKING`` too: an import moved into a function still ties the two modules.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.paths import REPO_ROOT

MODULES = [
    "ocr.models.dbnet",
    "ocr.lightning_modules.detection_module",
    "ocr.run.guard",
    "ocr.data.datamodule",
    "ocr.metrics.cleval.metric",
    "ocr.utils.loggers",
    "ocr.run.entry",
]

# A package may import only from packages on lower floors (and from itself); docs/architecture.md says why.
FLOORS = {
    "ocr.machine": 1,
    "ocr.types": 1,
    "ocr.polygons": 1,
    "ocr.utils": 2,
    "ocr.geometry": 2,
    "ocr.data": 3,
    "ocr.models": 3,
    "ocr.metrics": 4,
    "ocr.checkpoints": 4,
    "ocr.evaluation": 5,
    "ocr.run": 5,
    "ocr.lightning_modules": 6,
    "ocr.reporting": 7,
    "ocr.inference": 7,
    "ocr.debug": 8,
    "ocr.doctor": 8,
    "ocr.serve": 8,
}
# Run by hand or added by a debug config (the web app: runners/serve.py); training never imports them.
TOOLS = ("ocr.debug", "ocr.doctor", "ocr.serve")


def _module_files() -> dict[str, Path]:
    files = {}
    for path in sorted((REPO_ROOT / "ocr").rglob("*.py")):
        parts = path.relative_to(REPO_ROOT).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> Iterator[str]:
    """The dotted names an import statement of ``module`` reads (``from a import b`` gives a.b and a)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:  # relative: from the package of ``module``
        package = module.split(".")[: len(module.split(".")) - node.level + is_package]
        base = ".".join([*package, *([base] if base else [])])
    yield base
    yield from (f"{base}.{alias.name}" for alias in node.names)


def _graph() -> dict[str, set[str]]:
    """Each module of ocr/ and the modules of ocr/ it imports."""
    files = _module_files()
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                is_package = path.name == "__init__.py"
                targets |= {name for name in _imported(node, module, is_package) if name in files}
        graph[module] = targets - {module, "ocr"}  # ``from ocr import types`` reads ocr.types (and the root)
    return graph


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return _graph()


def test_nothing_below_the_tools_imports_them(graph: dict[str, set[str]]) -> None:
    found = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if _package(module) not in TOOLS
        for target in targets
        if _package(target) in TOOLS
    )
    assert not found, f"ocr/debug and ocr/doctor are top-floor tools; imported by: {found}"


def test_no_import_cycle(graph: dict[str, set[str]]) -> None:
    cycles = [component for component in _strongly_connected(graph) if len(component) > 1]
    assert not cycles, f"modules that import each other (through the listed ones): {cycles}"


def test_every_package_has_a_floor(graph: dict[str, set[str]]) -> None:
    packages = {_package(module) for module in graph} - {"ocr"}
    assert packages == set(FLOORS), (
        f"packages without a floor: {sorted(packages - set(FLOORS))}; floors without a package: "
        f"{sorted(set(FLOORS) - packages)} (add it here and to docs/architecture.md)"
    )


def test_each_package_imports_only_from_lower_floors(graph: dict[str, set[str]]) -> None:
    found = sorted(
        f"{module} (floor {FLOORS[_package(module)]}) -> {target} (floor {FLOORS[_package(target)]})"
        for module, targets in graph.items()
        if module != "ocr"
        for target in targets
        if _package(target) != _package(module) and FLOORS[_package(target)] >= FLOORS[_package(module)]
    )
    assert not found, f"imports that do not run down a floor: {found}"


def test_the_rules_see_an_import_inside_a_function() -> None:
    source = "def f():\n    from ocr.debug.inject import FaultInjector\n"
    node = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ImportFrom))
    assert "ocr.debug.inject" in set(_imported(node, "ocr.utils.x", is_package=False))


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of ``graph``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


@pytest.fixture(scope="module")
def import_lines() -> list[str]:
    """One fresh interpreter: import the package, report whether wandb came along, then import wandb."""
    code = (
        f"import sys\nfor m in {MODULES!r}: __import__(m)\nprint('wandb' in sys.modules)\n"
        "import wandb\nprint(wandb.__name__)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()


def test_importing_the_package_does_not_import_wandb(import_lines: list[str]) -> None:
    assert import_lines[-2] == "False"


def test_wandb_still_importable_after_timm(import_lines: list[str]) -> None:
    # ocr.models.dbnet (above) imports timm through ocr.models.encoder
    assert import_lines[-1] == "wandb"
