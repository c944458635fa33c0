"""Section 9, designs bigger than the array: one MatMul tiled over every compute tile, and a graph
with more fused groups than the device has tiles, run as segments.

`Product` multiplies two 256 x 256 float32 matrices (256 KiB each, four times a compute tile):
the `tile_matmul_over_array` rule spreads it over a grid of cores, and the script prints the rule's
decision and checks C against numpy (rtol 1e-4, atol 1e-4: the blocks sum in another order).
`Tower` is `--layers` residual layers h = h + act_i(W_i @ h) of width 64: every MatVec starts a
group, so 40 layers need 40 compute tiles at once. Its activations (ReLU, Tanh, GELUTanh) follow
Thue's square-free sequence, so no block of layers is followed by an alike block (alike blocks
would run over time on the same cores: `repeat_over_time`). The compiler cuts it into segments
run one after another within each call; the script prints the segments and the bytes crossing each cut
from `describe()` and checks the result against numpy (rtol 1e-4, atol 1e-4). `Swollen` cannot
fit even as segments (one Softmax of a 64 KiB row is more than a tile holds, and a row is not cut
into blocks as an elementwise call's tensors are): its DoesNotFit
is printed. Exit 1 on a mismatch or if Swollen compiles.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import aie_utils
import iron
from iron.errors import DoesNotFit
from iron.kernels import Add, Exp, GELUTanh, MatMul, MatVec, ReLU, Softmax, Tanh
from iron.plan.rules import Rule

SIZE, WIDTH = 256, 64
RTOL = ATOL = 1e-4


class Product(iron.Graph):
    """C = A @ B, A an input, B a weight."""

    def __init__(self, b: np.ndarray):
        self.b = iron.weight(b)

    def body(self, a):
        return MatMul.step(a, self.b)


ACTIVATIONS = {ReLU: lambda v: np.maximum(v, 0), Tanh: np.tanh,
               GELUTanh: lambda v: v / 2 * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3)))}


def square_free(n: int) -> list[int]:
    """Thue's square-free sequence over 0, 1, 2 (no block directly followed by itself): the
    number of 1s between consecutive 0s of the Thue-Morse sequence."""
    zeros = [i for i in range(4 * n + 4) if bin(i).count("1") % 2 == 0]
    return [b - a - 1 for a, b in zip(zeros, zeros[1:])][:n]


class Tower(iron.Graph):
    """`layers` residual layers h = h + act_i(W_i @ h), each W_i a param, act_i by `square_free`."""

    def __init__(self, layers: int, width: int = WIDTH, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.w = [iron.param((rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32))
                  for _ in range(layers)]
        self.acts = [list(ACTIVATIONS)[i] for i in square_free(layers)]

    def body(self, x):
        h = x
        for w, act in zip(self.w, self.acts):
            h = Add.step(h, act.step(MatVec.step(w, h)))
        return h


def numpy_tower(tower: Tower, x: np.ndarray) -> np.ndarray:
    h = x
    for w, act in zip(tower.w, tower.acts):
        h = h + ACTIVATIONS[act](w.array @ h)
    return h


class Swollen(iron.Graph):
    """A small Exp, then a Softmax of a 64 KiB row: more than a compute tile holds at once."""

    def body(self, x, y):
        return Exp.step(x), Softmax.step(y)


def section(text: str, title: str) -> list[str]:
    """The lines of one `title:` section of describe()'s text."""
    lines = text.splitlines()
    start = lines.index(f"{title}:")
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("  "))
    return lines[start:end]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="npu2", help="npu1, npu2 or a partition such as npu2_4col")
    parser.add_argument("--layers", type=int, default=40, help="Tower's layers")
    args = parser.parse_args(argv)
    aie_utils.set_current_device(aie_utils.from_name(args.device))
    rng = np.random.default_rng(0)
    ok = True

    a, b = (rng.standard_normal((SIZE, SIZE)).astype(np.float32) for _ in range(2))
    product = Product(b).compile(a=a)
    print(*(f"{rule}: {what}" for rule, what in product.plan.rules if rule is Rule.TILE_MATMUL_OVER_ARRAY), sep="\n")
    matches = np.allclose(product(a), a @ b, rtol=RTOL, atol=ATOL)
    print(f"Product {SIZE}^3 float32 ({args.device}): {'matches' if matches else 'DIFFERS from'} numpy")
    ok &= matches

    tower = Tower(args.layers)
    compiled = tower.compile(x=((WIDTH,), np.float32))
    counts = [len(plan.cores) for plan in compiled.plan.configurations]
    print(f"Tower ({args.layers} layers) on {args.device}: {len(counts)} segments on "
          f"{' + '.join(map(str, counts))} compute tiles")
    text = compiled.describe()
    if compiled.plan.segments:
        print(*section(text, "segments"), *section(text, "cuts"), sep="\n")
    x = rng.standard_normal(WIDTH).astype(np.float32)
    matches = np.allclose(compiled(x), numpy_tower(tower, x), rtol=RTOL, atol=ATOL)
    print(f"Tower ({args.device}): {'matches' if matches else 'DIFFERS from'} numpy (rtol {RTOL}, atol {ATOL})")
    ok &= matches

    big = ((16384,), np.float32)
    try:
        Swollen().compile(x=((8,), np.float32), y=big)
        print("Swollen compiled: expected DoesNotFit")
        return 1
    except DoesNotFit as refused:
        print(f"Swollen: DoesNotFit: {refused}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
