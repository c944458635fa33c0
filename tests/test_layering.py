"""The pipeline's layering, checked on the source: the IR imports nothing of iron, the compiler
never imports the runtime, and the emulator never reads the traced Program (no front end, no
reference), so agreeing with the oracle proves the Plan right."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "iron"


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return {n for n in names if n == "iron" or n.startswith("iron.")}


PASSES = ("compile", "fuse", "place", "route", "channels", "lower", "objects", "cores", "sequence", "emit",
          "shims", "words")
RULES = [
    ("ir.py", {"iron"}, "the IR imports nothing above it"),
    ("compiler", {"iron.runtime", "iron.frontend", "iron.reference"}, "the compiler never imports the runtime"),
    ("compiler", {"iron.kernels.library"}, "the compiler decides from kernel traits, never library classes"),
    ("runtime/emulator", {"iron.frontend", "iron.reference", *(f"iron.compiler.{m}" for m in PASSES)},
     "the emulator knows only the Plan"),
]


@pytest.mark.parametrize("where, forbidden, why", RULES, ids=[r[0] for r in RULES])
def test_layer_imports(where, forbidden, why):
    target = ROOT / where
    files = [target] if target.is_file() else sorted(target.rglob("*.py"))
    assert files
    for path in files:
        bad = {m for m in imported(path) if any(m == f or m.startswith(f + ".") for f in forbidden)}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}: {why}"
