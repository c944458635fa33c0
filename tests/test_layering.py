"""The layering, checked on the source (imports inside functions count too): no import cycles;
each layer imports only itself and the layers below it (the runtime registers its entry with the
front end, which imports nothing above it); aie_utils imports nothing from iron; the IR imports
nothing above it; the Plan and its readers import no compiler pass; the compiler never imports
the runtime, the toolchain driver or the front end; the runtime imports nothing of the compiler
but its entry (`compile_program`, from the runtime's own entry, compiled.py): the cost model
both use lies below them, in iron/plan; and the emulator never
reads the traced Program (no front end, no reference), so agreeing with the oracle proves the Plan
right; its hardware model (tiles, locks, DMAs, FIFOs, shims, cores) imports nothing of the replay
or the batching that observe it."""
import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

LAYERS = [  # lowest first
    ("aie_utils", ("aie_utils",)),
    ("base", ("iron.errors", "iron.dtypes", "iron.debug", "iron.names")),
    ("ir", ("iron.ir",)),
    ("kernels", ("iron.kernels",)),
    ("frontend", ("iron.frontend", "iron.reference")),
    ("plan", ("iron.plan",)),
    ("compiler", ("iron.compiler",)),
    ("toolchain", ("iron.toolchain",)),
    ("runtime", ("iron.runtime",)),
    ("package", ("iron",)),
    ("designs", ("iron.models.designs", "iron.models.smollm2_graph")),   # graphs written with the package
    ("programs", ("iron.demo", "iron.__main__")),
]


def module_files() -> dict[str, Path]:
    files = {}
    for package in ("iron", "aie_utils"):
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


MODULES = module_files()


def imports(module: str) -> set[str]:
    """The modules of iron and aie_utils that `module` imports (`from a import b` is a.b when b
    is a module, and the module defining b when a only re-exports it: `from iron.kernels import
    Concat` imports iron.kernels.library)."""
    found = set()
    for node in ast.walk(tree(module)):
        if isinstance(node, ast.Import):
            found |= {owner(a.name) for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                found.add(sub if sub in MODULES else defining(owner(node.module), a.name))
    return found - {None, module}


@cache
def tree(module: str) -> ast.Module:
    return ast.parse(MODULES[module].read_text())


def defining(module: str | None, name: str) -> str | None:
    """The module defining `name` that `module` offers: itself, or, when its top level imports
    `name` from another of iron's modules, that module's."""
    if module is None:
        return None
    for node in tree(module).body:
        if isinstance(node, ast.ImportFrom) and node.module and any(a.name == name for a in node.names):
            sub = f"{node.module}.{name}"
            return sub if sub in MODULES else defining(owner(node.module), name)
    return module


def owner(name: str) -> str | None:
    """The module of iron or aie_utils that `name` names, or None for any other."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def layer(module: str) -> int:
    best = max((p for _, ps in LAYERS for p in ps if module == p or module.startswith(p + ".")), key=len)
    return next(i for i, (_, ps) in enumerate(LAYERS) if best in ps)


def test_a_re_exported_class_counts_as_an_import_of_the_module_defining_it():
    assert defining("iron.kernels", "Concat") == "iron.kernels.library"
    assert defining("iron.kernels", "Kernel") == "iron.kernels.base"
    assert "iron.kernels.library" in imports("iron.models.designs")   # from iron.kernels import Add, ...


def test_every_module_has_a_layer():
    for module in MODULES:
        assert layer(module) >= 0


def test_no_import_cycles():
    graph = {m: imports(m) for m in MODULES}
    done: set[str] = set()

    def visit(module: str, path: list[str]):
        if module in path:
            cycle = path[path.index(module):] + [module]
            pytest.fail(f"import cycle: {' -> '.join(cycle)}")
        if module in done:
            return
        for dep in sorted(graph[module]):
            visit(dep, path + [module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])


@pytest.mark.parametrize("module", sorted(MODULES))
def test_layers_import_only_downward(module):
    name = LAYERS[layer(module)][0]
    upward = {dep for dep in imports(module) if layer(dep) > layer(module)}
    assert not upward, f"{module} ({name}) imports {sorted(upward)} of a higher layer"


def test_aie_utils_imports_nothing_from_iron():
    for module in MODULES:
        if module.startswith("aie_utils"):
            assert not {dep for dep in imports(module) if dep.startswith("iron")}, module


ORACLE = ("blocks", "gguf_file", "numpy_forward", "smollm2", "tokenizer")   # iron.models but its designs
RULES = [
    ("iron.ir", {"iron"}, "the IR imports nothing above it"),
    ("iron.compiler", {"iron.runtime", "iron.frontend", "iron.reference", "iron.toolchain"},
     "the compiler never imports the runtime or the toolchain driver"),
    ("iron.plan", {"iron.compiler", "iron.toolchain", "iron.runtime", "iron.frontend", "iron.reference"},
     "the Plan and its readers (printers, check_plan) import no compiler pass"),
    ("iron.toolchain", {"iron.plan", "iron.compiler", "iron.runtime", "iron.frontend", "iron.reference"},
     "the toolchain driver builds printed text and knows no Plan"),
    ("iron.compiler", {"iron.kernels.library"}, "the compiler decides from kernel traits, never library classes"),
    ("iron.runtime.emulator", {"iron.frontend", "iron.reference", "iron.compiler"},
     "the emulator knows only the Plan and the cost model (iron/plan), never a compiler pass"),
    *((m, {"iron.compiler"}, "the runtime runs Plans and prices them with iron/plan's cost model")
      for m in MODULES if m.startswith("iron.runtime.") and m != "iron.runtime.compiled"),
    ("iron.runtime.compiled", {m for m in MODULES if m.startswith("iron.compiler.") and m != "iron.compiler.compile"},
     "the runtime's entry calls the compiler's entry, compile_program, and nothing else of it"),
    *((f"iron.runtime.emulator.{m}", {"iron.runtime.emulator.replay", "iron.runtime.emulator.batch"},
       "the emulator's hardware model records its data actions (acts.py); replay and batching observe them")
      for m in ("tile", "lock", "dma", "objectfifo", "shim", "core")),
    *((f"iron.models.{m}", {"iron.frontend", "iron.compiler", "iron.runtime", "iron.reference", "iron.kernels"},
       "a model's numpy forward is the oracle of iron's designs, so it uses none of iron's machinery")
      for m in ORACLE),
]


@pytest.mark.parametrize("where, forbidden, why", RULES, ids=[r[0] for r in RULES])
def test_layer_imports(where, forbidden, why):
    modules = [m for m in MODULES if m == where or m.startswith(where + ".")]
    assert modules
    for module in modules:
        bad = {m for m in imports(module) if any(m == f or m.startswith(f + ".") for f in forbidden)}
        assert not bad, f"{module} imports {sorted(bad)}: {why}"
