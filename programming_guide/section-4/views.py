"""Section 4, views and per-call slices: a KV cache filled from one projection's parts.

Defines `KV`: each call projects x (MatVec by `wkv`, 16 outputs), views the result inside the
same call (`y[:8]` the key, `y[8:]` the value, `y.reshape(2, 8)` the two halves as rows) and
writes the key into row `pos` of `kcache` and the value, as two rows of 4, into the per-call
slice `vcache[2 * pos:2 * pos + 2]`. It returns the sum of the two halves. The reference and
the compiled graph are checked exactly (int32) against numpy, and a `pos` past the cache's end
is refused with the same text by both. A mismatch exits 1.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import aie_utils
import iron
from iron import Scratchpad
from iron.errors import IndexOutOfRange
from iron.kernels import Add, Copy, MatVec

POSITIONS, WIDTH = 4, 4


class KV(iron.Graph):
    """kcache[pos] = y[:8]; vcache[2*pos:2*pos + 2] = y[8:] as (2, 4); returns y[:8] + y[8:]."""

    def __init__(self, wkv: np.ndarray):
        self.wkv = iron.param(wkv)
        self.kcache = iron.state((POSITIONS, 8), np.int32, name="kcache")
        self.vcache = iron.state((2 * POSITIONS, 4), np.int32, name="vcache")

    def body(self, x, *, pos: Scratchpad[np.int32]):
        y = MatVec.step(self.wkv, x)
        Copy.step(y[:8], out=self.kcache[pos])
        Copy.step(y[8:].reshape(2, 4), out=self.vcache[2 * pos:2 * pos + 2])
        halves = y.reshape(2, 8)
        return Add.step(halves[0], halves[1])


def numpy_kv(wkv, xs):
    kcache, vcache, outs = np.zeros((POSITIONS, 8), np.int32), np.zeros((2 * POSITIONS, 4), np.int32), []
    for pos, x in enumerate(xs):
        y = wkv @ x
        kcache[pos], vcache[2 * pos:2 * pos + 2] = y[:8], y[8:].reshape(2, 4)
        outs.append(y[:8] + y[8:])
    return outs, kcache, vcache


def check(label, run, read, wkv, xs) -> bool:
    outs = [run(x, pos=pos) for pos, x in enumerate(xs)]
    want, kcache, vcache = numpy_kv(wkv, xs)
    ok = all(np.array_equal(o, w) for o, w in zip(outs, want))
    ok &= np.array_equal(read("kcache"), kcache) and np.array_equal(read("vcache"), vcache)
    print(f"{label}: vcache rows 2..3 = {read('vcache')[2:4].tolist()} -> "
          f"{'matches numpy (exact)' if ok else 'DIFFERS from numpy'}")
    return ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="npu2", help="npu1, npu2 or a partition such as npu2_4col")
    args = parser.parse_args(argv)
    aie_utils.set_current_device(aie_utils.from_name(args.device))
    rng = np.random.default_rng(4)
    wkv = rng.integers(-3, 4, (16, WIDTH)).astype(np.int32)
    xs = [rng.integers(-5, 6, WIDTH).astype(np.int32) for _ in range(POSITIONS)]
    graph = KV(wkv)
    ok = check("reference", graph.reference, graph.read, wkv, xs)
    compiled = KV(wkv).compile(x=((WIDTH,), np.int32))
    ok &= check(f"compiled ({args.device})", compiled, compiled.read, wkv, xs)
    texts = []
    for call in (graph.reference, compiled):
        try:
            call(xs[0], pos=POSITIONS)
        except IndexOutOfRange as refused:
            texts.append(str(refused))
    print(f"pos={POSITIONS}: {texts[0] if len(set(texts)) == 1 and len(texts) == 2 else texts}")
    return 0 if ok and len(set(texts)) == 1 and len(texts) == 2 else 1


if __name__ == "__main__":
    sys.exit(main())
