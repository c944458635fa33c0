"""Section 2, composing kernels: one residual MLP layer, x + SiLU(W @ RMSNorm(x, g)).

Defines `ResidualLayer` (RMSNorm -> MatVec -> SiLU -> Add in float32), checks its reference
against a hand-written numpy layer, compiles it and prints what fusion and placement made of the
four kernel calls: the groups (`compiled.plan.groups`), the rule that closed each group
(`compiled.plan.rules`) and the tile each group runs on. The compiled call is checked against
numpy (rtol 1e-5, atol 1e-5); a mismatch exits 1. It does not explain the fusion rules' code
(iron/compiler/fuse.py does).
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import aie_utils
import iron
from iron.kernels import Add, MatVec, RMSNorm, SiLU

WIDTH = 128
RTOL = ATOL = 1e-5


class ResidualLayer(iron.Graph):
    """x + SiLU(W @ RMSNorm(x, g)): four kernels, the data flowing from each to the next."""

    def __init__(self, width: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.w = iron.param((rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32))
        self.g = iron.param((1 + 0.1 * rng.standard_normal(width)).astype(np.float32))

    def body(self, x):
        h = RMSNorm.step(x, self.g)
        y = MatVec.step(self.w, h)
        return Add.step(x, SiLU.step(y))


def numpy_layer(layer: ResidualLayer, x: np.ndarray) -> np.ndarray:
    """The same layer written by hand in float32 numpy."""
    h = x / np.sqrt(np.mean(x * x) + np.float32(1e-5)) * layer.g.array
    y = layer.w.array @ h
    return x + y / (1 + np.exp(-y))


def report(label: str, got: np.ndarray, expected: np.ndarray) -> bool:
    """Print what was computed and whether it agrees with numpy within the tolerance."""
    ok = np.allclose(got, expected, rtol=RTOL, atol=ATOL)
    verdict = f"matches numpy (rtol {RTOL}, atol {ATOL})" if ok else \
        f"DIFFERS from numpy: max |error| {np.max(np.abs(got - expected)):.3g}"
    print(f"{label}: out[:3] = {np.array2string(got[:3], precision=4)} -> {verdict}")
    return ok


def show_fusion(compiled) -> None:
    """Which kernel calls fused into which group and where it runs; every rule that decided."""
    plan = compiled.plan
    tiles = {core.group: core.tile.name for core in plan.cores}
    print("Groups (compiled.plan.groups), one core each:")
    for group, calls in plan.groups:
        print(f"  {group} on {tiles[group]}: {' -> '.join(calls)}")
    print("Rules that decided (compiled.plan.rules):")
    for rule, decided in plan.rules:
        print(f"  {rule}: {decided}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="npu2", help="npu1, npu2 or a partition such as npu2_4col")
    args = parser.parse_args(argv)
    aie_utils.set_current_device(aie_utils.from_name(args.device))

    layer = ResidualLayer(WIDTH)
    x = np.random.default_rng(1).standard_normal(WIDTH).astype(np.float32)
    expected = numpy_layer(layer, x)
    ok = report("reference", layer.reference(x), expected)

    compiled = layer.compile(x=((WIDTH,), np.float32))
    show_fusion(compiled)
    print()
    print(compiled.describe())
    print()
    ok &= report(f"compiled ({args.device})", compiled(x), expected)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
