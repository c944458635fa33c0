"""Designs of real size: cold compile time against size, and the emulator against reference().

Each row of COMPILE_ROWS is a series of (label, make) of growing size: a fresh graph and the
spec it compiles with. For each size it prints the cold compile time (trace, every pass, MLIR
and kernel sources), the segments, the kernel calls per launch and the compute tiles, and the
ratios to the series' first size: the time must grow no faster than calls x tiles (`time/work`
<= 1); then the series' largest time against the target. Series:
MatMul 256^3 to 2048^3 (bfloat16), MatVec 1024^2 to 4096^2 and Add over 2^16 to 2^20 (float32),
the decoder at 1 to 8 layers.
Targets: MatMul 2048^3 and the 8-layer decoder (section 8's, at width 256, hidden 1024,
context 128, vocab 512: segmented) compile in under 2 s; the emulator runs MatMul 512^3 float32,
and 509^3 (odd sides, padded to 512 by `pad_to_block`), within 3x of reference() per call. A segmented design counts the calls and tiles of every
segment. Then the 8-layer decoder's tiles, segments and tokens per second on the emulator. Add a
series by appending to COMPILE_ROWS.
"""
import sys
import time
from pathlib import Path

import numpy as np
from _timing import race

import aie_utils
import iron
from aie_utils import from_name
from iron.kernels import Add, MatMul, MatVec
from iron.plan.mlir import print_mlir
from iron.plan.plan import Invoke, Loop, TileKind
from iron.plan.sources import kernel_sources


class Product(iron.Graph):
    """C = A @ B, A an input, B a weight."""

    def __init__(self, b):
        self.b = iron.weight(b)

    def body(self, a):
        return MatMul.step(a, self.b)


def matmul(size: int, dtype=iron.bfloat16):
    def make():
        return Product(np.zeros((size, size), dtype)), {"a": ((size, size), dtype)}
    return f"MatMul {size}^3 {np.dtype(dtype).name}", make


class Projection(iron.Graph):
    """y = W @ x, W a weight."""

    def __init__(self, w):
        self.w = iron.weight(w)

    def body(self, x):
        return MatVec.step(self.w, x)


class Sum(iron.Graph):
    def body(self, x, y):
        return Add.step(x, y)


def matvec(size: int):
    def make():
        return Projection(np.zeros((size, size), np.float32)), {"x": ((size,), np.float32)}
    return f"MatVec {size}^2 float32", make


def add(size: int):
    def make():
        return Sum(), {"x": ((size,), np.float32), "y": ((size,), np.float32)}
    return f"Add 2^{size.bit_length() - 1} float32", make


sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "programming_guide" / "section-8"))
import decoder  # noqa: E402  (the guide's decoder, not a package)

TARGET = 2.0   # seconds: the largest of each series, cold (issue 10)
DECODER_SIZE = {"vocab": 512, "width": 256, "hidden": 1024, "context": 128}


def decoder_layers(layers: int):
    def make():
        return decoder.Decoder(layers, 0, **DECODER_SIZE), {}
    return f"decoder {layers} layers", make


COMPILE_ROWS = {
    "MatMul": [matmul(s) for s in (256, 512, 1024, 2048)],
    "MatVec": [matvec(s) for s in (1024, 2048, 4096)],
    "Add": [add(1 << e) for e in (16, 18, 20)],
    "decoder": [decoder_layers(n) for n in (1, 2, 4, 8)],
}


def cold_compile(make) -> tuple[float, object]:
    graph, spec = make()
    start = time.perf_counter()
    body = graph.compile(**spec)
    print_mlir(body.plan)
    kernel_sources(body.plan)
    return time.perf_counter() - start, body.plan


def kernel_calls(plan) -> int:
    """Kernel calls one launch runs, over every core (a Loop's body counted per iteration)."""
    steps = {f.name: len(f.steps) for f in plan.functions}

    def count(program) -> int:
        return sum(item.count * count(item.body) if isinstance(item, Loop)
                   else steps[item.function] if isinstance(item, Invoke) else 0 for item in program)
    return sum(count(core.program) for core in plan.cores)


def work(plan) -> tuple[int, int]:
    """(kernel calls per launch, compute tiles) of a Plan, summed over its segments."""
    configurations = plan.configurations
    tiles = sum(len({c.tile for c in p.cores if c.tile.kind is TileKind.COMPUTE}) for p in configurations)
    return sum(kernel_calls(p) for p in configurations), tiles


def compile_series(name: str, rows):
    first = None
    for label, make in rows:
        seconds, plan = min((cold_compile(make) for _ in range(2)), key=lambda r: r[0])
        calls, tiles = work(plan)
        first = first or (seconds, calls * tiles)
        grows, effort = seconds / first[0], calls * tiles / first[1]
        print(f"compile {label:24s}: {seconds * 1e3:8.1f} ms  {len(plan.configurations):3d} segments  "
              f"{calls:8d} kernel calls  {tiles:3d} tiles  time x{grows:6.2f}  calls*tiles x{effort:8.1f}  "
              f"time/work {grows / effort:5.2f} (target <= 1)")
    print(f"  {name}: largest compile {seconds:.2f} s = {seconds / TARGET:4.2f}x the target of {TARGET:.0f} s")


def emulator_against_reference(size: int = 512):
    """A MatMul size^3 float32 per call on the emulator against reference(), with the tiles and
    kernel calls its grid takes (509: padded by `pad_to_block`)."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((size, size)).astype(np.float32) for _ in range(2))
    graph = Product(b)
    body = graph.compile(a=a)
    body(a=a)
    ours, theirs = race(lambda: body(a=a), lambda: graph.reference(a=a), number=5, repeat=20,
                        warm=0.15)
    calls, tiles = work(body.plan)
    padded = " (padded by pad_to_block)" * any(p.padded for p in body.plan.placements)
    print(f"emulator MatMul {size}^3 float32{padded}: {tiles} tiles, {calls} kernel calls, {ours * 1e3:8.2f} ms per "
          f"call, reference() {theirs * 1e3:7.2f} ms, ratio {ours / theirs:5.1f}x (target <= 3x)")


def decoder_on_the_emulator(layers: int = 8, tokens: int = 8):
    """The decoder's segments and tiles, and its tokens per second host-driven and as a device loop."""
    model = decoder.Decoder(layers, 0, **DECODER_SIZE)
    first, body = decoder.compile_versions(model)
    counts = [len(p.cores) for p in body.plan.configurations]
    crossing = [c.nbytes for c in body.plan.cuts]
    print(f"decoder {layers} layers on npu2: {len(counts)} segments on {' + '.join(map(str, counts))} compute tiles "
          f"(of 32), bytes crossing each cut {crossing}")
    prompt = decoder.PROMPT
    expected = decoder.numpy_generate(model, prompt, tokens)[0]
    rates = {}
    for label, generate in (("host-driven", lambda: decoder.host_driven(model, first, body, prompt, tokens)),
                            ("device loop", lambda: decoder.device_loop(model, first, body, prompt, tokens, 2))):
        got, rates[label] = decoder.measured(model, first, prompt, generate)
        assert got == expected, (label, got, expected)
    print(f"  tokens per second on the emulator: host-driven {rates['host-driven']:.1f}, device loop "
          f"{rates['device loop']:.1f} ({tokens} tokens, equal to numpy token for token)")


def main():
    aie_utils.set_current_device(from_name("npu2"))
    for name, rows in COMPILE_ROWS.items():
        compile_series(name, rows)
    emulator_against_reference()
    emulator_against_reference(509)
    decoder_on_the_emulator()


if __name__ == "__main__":
    main()
