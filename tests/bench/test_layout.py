"""bench/ stands on its own: no module reaches into tests/ or splices sys.path, none is
over 500 lines, and what the GPU benchmarks import at load time travels in the carried
tree (bench/recipes/GPU.md: services/common, stage0 and stage1 on PYTHONPATH, no deploy/,
no session or gateway service, no client package)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
MODULES = sorted(BENCH.rglob("*.py"))
# Not on the GPU machine's PYTHONPATH (bench/recipes/GPU.md), or not carried at all.
NOT_CARRIED = ("tests", "deploy", "antiphon.session", "antiphon.gateway", "antiphon.client")


def module_name(path: Path) -> str:
    parts = path.relative_to(BENCH.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def top_level_imports(path: Path) -> set[str]:
    """What a module imports when it is loaded (imports inside functions are lazy)."""
    found: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            # `from bench.gpu import sessions` loads bench.gpu.sessions.
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


def every_import(path: Path) -> set[str]:
    """Every module a file names in an import, lazy ones included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_no_module_imports_tests_or_splices_sys_path(path: Path) -> None:
    assert "sys.path" not in path.read_text()
    assert sorted(m for m in every_import(path) if m.split(".")[0] == "tests") == []
    assert len(path.read_text().splitlines()) <= 500


def loaded_with(root: str) -> set[str]:
    """Every bench module `root` loads, transitively, and everything they import."""
    by_name = {module_name(p): p for p in MODULES}
    seen: set[str] = set()
    todo = [root]
    imported: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or name not in by_name:
            continue
        seen.add(name)
        own = top_level_imports(by_name[name])
        imported |= own
        # A package's __init__ runs before any of its modules.
        todo += [m for m in own if m in by_name] + [name.rpartition(".")[0]]
    return imported


@pytest.mark.parametrize("root", ["bench.gpu.__main__", "bench.duplex.__main__"])
def test_the_gpu_benchmarks_load_only_what_the_carried_tree_has(root: str) -> None:
    imported = loaded_with(root)
    assert "bench.gpu.worker" in imported or "bench.duplex.workers" in imported
    assert sorted(m for m in imported if m.startswith(NOT_CARRIED)) == []


def test_the_layout_check_sees_a_module_that_loads_the_local_stack() -> None:
    # The check itself: a bench that loads deploy/'s stack is seen as doing so.
    assert any(m.startswith("deploy") for m in loaded_with("bench.faults.__main__"))
