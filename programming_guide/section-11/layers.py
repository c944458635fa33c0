"""Section 11, reusing the cores over time: a loop over layers.

iron.models.designs.MLP is a residual MLP written as a plain Python loop over its layers
(x = x + SiLU(W @ RMSNorm(x, g)), each layer's W and g params of their own): the same kernels
and shapes every layer, the residual stream carried from one layer to the next. The script
checks reference() and the compiled design against the MLP in numpy (float32: rtol 1e-4,
atol 1e-4), then prints how many configurations one call takes, describe()'s segments and
repeat_over_time lines, and the cost model's estimate of a call beside its roofline bound. Exit 1 on a mismatch.
"""
from __future__ import annotations

import sys

import numpy as np
from heads import arguments, show

from iron.models.designs import MLP, numpy_mlp

LAYERS, WIDTH = 48, 128
TOL = 1e-4


def report(label: str, got, want) -> bool:
    ok = np.allclose(got, want, rtol=TOL, atol=TOL)
    print(f"{label}: out[:3] = {np.round(got[:3], 4)} -> {'matches' if ok else 'DIFFERS from'} numpy "
          f"(rtol {TOL}, atol {TOL})")
    return ok


def main(argv=None) -> int:
    args = arguments(__doc__, argv)

    mlp = MLP(WIDTH, LAYERS)
    x = np.random.default_rng(1).standard_normal(WIDTH).astype(np.float32)
    want = numpy_mlp(mlp, x)
    ok = report("reference", mlp.reference(x), want)
    compiled = mlp.compile(x=((WIDTH,), np.float32))
    ok &= report(f"compiled ({compiled.device.name})", compiled(x), want)
    show(compiled, f"{LAYERS} layers of {WIDTH}", [x], args.svg)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
