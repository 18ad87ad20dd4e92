"""Imports run one way: core ``revive`` ← ``activities`` ← ``runbooks`` ← ``workflows`` ← ``worker``
← ``cli``. A module may import its own layer and the layers below it, never one above.

The walk reads every ``import`` statement (module level and inside functions) with ``ast``, so a
lazy import against the layering fails the test as well.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["revive", "activities", "runbooks", "workflows", "worker", "cli"]
"""Lowest first."""


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
    return out


def arrows_against_layering() -> list[str]:
    bad = []
    for i, layer in enumerate(LAYERS):
        allowed = set(LAYERS[: i + 1])
        for path in sorted((ROOT / layer).rglob("*.py")):
            for line, mod in _imports(path):
                top = mod.split(".")[0]
                if top in LAYERS and top not in allowed:
                    bad.append(f"{path.relative_to(ROOT)}:{line} imports {mod} ({layer} → {top})")
    return bad


def test_no_import_runs_against_the_layering() -> None:
    assert arrows_against_layering() == []


def test_the_walk_sees_a_lazy_import_against_the_layering(tmp_path: Path) -> None:
    p = tmp_path / "m.py"
    p.write_text("def f():\n    from worker.main import WORKFLOWS\n    import cli.main\n")
    assert [m for _, m in _imports(p)] == ["worker.main", "cli.main"]
