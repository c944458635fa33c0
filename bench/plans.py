"""Every design's Plan and estimate, to compare two versions of the compiler (issue 23: "whether
its Plan changed and its estimated time before and after, none slower").

For each design of the tests (tests/compiler/designs.py's examples and the shapes the issues
name), of the programming guide (every graph a section-*/*.py calls, caught as it is called) and
of bench/ (scale.py's series, designs.py's three at full size), measured in this checkout: the
configurations per call, a digest of its MLIR (the Plan as the device gets it), the timed
emulator's estimate per call with vectorised kernels (the roofline) and with iron's kernels as
written, and the roofline bound. bench/model.py prints SmolLM2's own figures.

    python bench/plans.py --json after.json [tests|guide|bench ...]   # measure this checkout
    python bench/plans.py --compare before.json after.json            # the table, worse ones last

Each guide file and each full-size design runs in a process of its own, given at most LIMIT
seconds; one that takes longer is reported as such.
"""
from __future__ import annotations

import hashlib
import json
import os
import runpy
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
os.environ.setdefault("IRON_BACKEND", "emulator")
os.environ.setdefault("IRON_QUIET", "1")

import aie_utils  # noqa: E402
import iron  # noqa: E402
from iron.runtime.compiled import CompiledGraph  # noqa: E402

LIMIT = 600   # seconds per guide file or full-size design
WORSE = 1.01  # an estimate more than 1 % above its before is worse


@dataclass(frozen=True)
class Row:
    """One design's figures in one checkout."""

    source: str
    name: str
    device: str
    configurations: int
    mlir: str          # a digest of its MLIR: equal digests, an unchanged Plan
    call_us: float     # per call, vectorised kernels (the roofline)
    written_us: float  # per call, iron's kernels as written
    bound_us: float


def measured(source: str, name: str, compiled, *tensors, **values) -> Row:
    e = compiled.estimate(*tensors, **values)
    from iron.plan.mlir import print_mlir
    mlir = "".join(print_mlir(p) for p in compiled.segments)
    digest = hashlib.sha1(mlir.encode()).hexdigest()[:10]
    return Row(source, name, compiled.plan.device.family, len(compiled.plan.configurations), digest,
               e.call_ns / 1e3, e.written_ns / 1e3, e.bound.ns / 1e3)


# ---- the tests' designs ----------------------------------------------------------------------------

class RowArgmax(iron.Graph):
    """Argmax of each row of a batch (tests/runtime/test_row_batches.py's Max)."""

    def body(self, x):
        from iron.kernels import Argmax
        return Argmax.step(x)


def test_designs() -> list[tuple[str, Callable]]:
    """(name, make -> (graph, tensors, device)) of the tests' example designs and named shapes."""
    from iron.models.blocks import Q4_1
    from tests.compiler import designs as d

    def example(make, device="npu2"):
        return lambda: (graph := make(), d.example(graph), device)

    def product(m, k, n, dtype, device="npu2", out=None):
        a, b = d.operands(m, k, n, dtype)
        return lambda: (d.Product(b, out), {"a": a}, device)

    def products(n):
        a, b = d.operands(n, n, n, np.float32)
        return lambda: (d.ProductOfProducts(b / 17, d.operands(n, n, n, np.float32, seed=3)[1] / 17), {"a": a / 17}, "npu2")

    def rows(n, width, dtype):
        x = (np.random.default_rng(5).standard_normal((n, width)) * 50).astype(dtype)
        return lambda: (RowArgmax(), {"x": x}, "npu2")

    def quantized(kind, rows, cols, device="npu2"):
        rng = np.random.default_rng(0)
        return lambda: (kind(d.random_blocks(rng, rows, cols, Q4_1), Q4_1),
                        {"x": rng.standard_normal(cols).astype(np.float32)}, device)

    found = [(f"{f.__name__} {device}", example(f, device)) for f in
             (d.add_one, d.mlp_layer, d.mlp, d.big_matvec) for device in ("npu2", "npu1")]
    found += [(f"MatMul {m}x{k}x{n} {np.dtype(t).name} {dev}", product(m, k, n, t, dev)) for m, k, n, t, dev in
              ((509, 251, 509, np.float32, "npu2"), (512, 251, 512, np.float32, "npu2"),
               (509, 251, 509, np.float32, "npu1"), (256, 512, 1024, iron.bfloat16, "npu2"),
               (1024, 1536, 6144, iron.bfloat16, "npu2"), (128, 64, 127, iron.bfloat16, "npu2"),
               (128, 64, 511, iron.bfloat16, "npu2"), (32, 509, 300, np.int16, "npu2_3col"))]
    found += [("MatMul 64x2001x64 int8 -> int32 npu2", product(64, 2001, 64, np.int8, "npu2", np.int32))]
    found += [(f"(a @ b) @ (a @ d) {n}^3 float32 npu2", products(n)) for n in (300, 310)]
    found += [(f"Argmax of {n} rows of 40 {np.dtype(t).name} npu2", rows(n, 40, t)) for n, t in
              ((3000, np.int8), (3001, np.int8), (3000, np.float32))]
    found += [(f"{kind.__name__} Q4_1 {r}x{c} {dev}", quantized(kind, r, c, dev)) for kind, r, c, dev in
              ((d.Layer, 49152, 576, "npu2"), (d.Layer, 1536, 576, "npu2"), (d.Layer, 1536, 576, "npu1"),
               (d.Head, 49152, 576, "npu2"), (d.Head, 576, 49152, "npu2"))]
    return found


def run_tests() -> list[Row]:
    rows = []
    for name, make in test_designs():
        graph, tensors, device = make()
        compiled = graph.compile(**tensors, device=aie_utils.from_name(device))
        rows.append(measured("tests", name, compiled, **tensors))
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


# ---- the guide: every compiled graph a file calls -------------------------------------------------

def guide_files() -> list[Path]:
    sections = sorted((ROOT / "programming_guide").glob("section-*"), key=lambda p: int(p.name.split("-")[1]))
    return [f for s in sections for f in sorted(s.glob("*.py"))]


def run_guide_file(path: Path) -> list[Row]:
    """Run one guide file (npu2) catching the first host-driven call of each graph it compiles,
    then estimate each with those tensors."""
    first: dict[int, tuple] = {}
    call = CompiledGraph.__call__

    def catching(self, *tensors, trace=None, **values):
        first.setdefault(id(self), (self, tensors, values))
        return call(self, *tensors, trace=trace, **values)
    CompiledGraph.__call__ = catching
    os.chdir(path.parent)
    sys.argv = [path.name, "--device", "npu2"]
    sys.path.insert(0, str(path.parent))
    try:
        runpy.run_path(str(path), run_name="__main__")
    except SystemExit:
        pass
    finally:
        CompiledGraph.__call__ = call
    source = str(path.relative_to(ROOT / "programming_guide"))
    names: dict[str, int] = {}
    rows = []
    for compiled, tensors, values in first.values():
        label = compiled.plan.name
        names[label] = names.get(label, 0) + 1
        rows.append(measured(source, f"{label} #{names[label]}" if names[label] > 1 else label, compiled,
                             *tensors, **values))
    return rows


# ---- bench/ -----------------------------------------------------------------------------------------

def bench_series() -> list[tuple[str, Callable]]:
    """scale.py's MatMul, MatVec and Add series (npu2) and its 509^3 and 512^3 float32 MatMuls."""
    import scale
    found = [(label, make) for name, rows in scale.COMPILE_ROWS.items() if name != "decoder" for label, make in rows]
    for size in (512, 509):
        b = np.random.default_rng(0).standard_normal((size, size)).astype(np.float32)
        found.append((f"MatMul {size}^3 float32", lambda b=b: (scale.Product(b), {"a": (b.shape, b.dtype)})))
    return found


def run_bench_series() -> list[Row]:
    rows = []
    for label, make in bench_series():
        graph, spec = make()
        tensors = {k: np.ones(shape, dtype) for k, (shape, dtype) in spec.items()}
        compiled = graph.compile(**tensors, device=aie_utils.from_name("npu2"))
        rows.append(measured("bench/scale.py", label, compiled, **tensors))
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def run_bench_design(name: str, device: str) -> list[Row]:
    import designs
    design = {d.name: d for d in designs.DESIGNS}[name]
    aie_utils.set_current_device(aie_utils.from_name(device))
    graph = design.make()
    inputs = design.inputs(graph)
    return [measured("bench/designs.py", design.label, graph.compile(*inputs), *inputs)]


# ---- measuring in processes of their own, comparing ---------------------------------------------------

def apart(*args) -> tuple[list[Row], str]:
    """Rows of `python plans.py --one ARGS` in a process of its own, or what went wrong."""
    try:
        done = subprocess.run([sys.executable, __file__, "--one", *args], capture_output=True, text=True,
                              timeout=LIMIT, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return [], f"{' '.join(args)}: not measured within {LIMIT} s"
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return [Row(**json.loads(line)) for line in lines], "" if done.returncode == 0 else \
        f"{' '.join(args)}: failed\n{done.stderr.strip()[-2000:]}"


def one(args: list[str]) -> list[Row]:
    if args[0] == "guide":
        return run_guide_file(Path(args[1]))
    return run_bench_design(args[1], args[2])


def measure_all(parts: list[str]) -> tuple[list[Row], list[str]]:
    rows, problems = [], []
    if "tests" in parts:
        rows += run_tests()
    if "bench" in parts:
        rows += run_bench_series()
        import designs
        jobs = [("design", d.name, dev) for d in designs.DESIGNS for dev in designs.DEVICES]
    else:
        jobs = []
    if "guide" in parts:
        jobs = [("guide", str(f)) for f in guide_files()] + jobs
    for job in jobs:
        got, problem = apart(*job)
        rows += got
        problems += [problem] if problem else []
        print(f"{' '.join(job)}: {len(got)} designs {problem}", file=sys.stderr, flush=True)
    return rows, problems


def compare(before: list[dict], after: list[dict]) -> list[str]:
    """The table: each design in either, whether its Plan changed, its estimates before and after."""
    def key(r):
        return r["source"], r["name"], r["device"]
    old, new = {key(r): r for r in before}, {key(r): r for r in after}
    lines = ["| source | design | device | Plan | configurations | estimate before (us) | after (us) | "
             "iron's kernels before | after | bound after |", "|" + "---|" * 10]
    worse = []
    for k in sorted(set(old) | set(new), key=lambda k: (k not in new or k not in old, k)):
        b, a = old.get(k), new.get(k)
        if b is None or a is None:
            lines.append(f"| {' | '.join(k)} | {'only after' if b is None else 'only before'} | | | | | | |")
            continue
        changed = "changed" if a["mlir"] != b["mlir"] else "same"
        row = (f"| {' | '.join(k)} | {changed} | {b['configurations']} -> {a['configurations']} | {b['call_us']:.1f} "
               f"| {a['call_us']:.1f} | {b['written_us']:.1f} | {a['written_us']:.1f} | {a['bound_us']:.1f} |")
        lines.append(row)
        if a["call_us"] > WORSE * b["call_us"]:
            worse.append(row)
    return lines + ["", f"worse after ({len(worse)}):"] + worse


def main(argv: list[str]) -> int:
    if argv[:1] == ["--one"]:
        for row in one(argv[1:]):
            print(json.dumps(asdict(row)), flush=True)
        return 0
    if argv[:1] == ["--compare"]:
        print("\n".join(compare(*(json.loads(Path(p).read_text()) for p in argv[1:3]))))
        return 0
    out = argv[argv.index("--json") + 1] if "--json" in argv else None
    parts = [a for a in argv if a in ("tests", "guide", "bench")] or ["tests", "guide", "bench"]
    rows, problems = measure_all(parts)
    for r in rows:
        print(f"{r.source:28s} {r.name[:48]:48s} {r.device}: {r.configurations} configurations, {r.call_us:10.1f} us "
              f"vectorised, {r.written_us:12.1f} us iron's kernels, bound {r.bound_us:9.1f} us, MLIR {r.mlir}")
    print("\n".join(problems))
    if out:
        Path(out).write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
