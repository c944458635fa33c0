"""Section 11, reusing the cores over time: a loop over attention heads.

iron.models.designs.GroupedQueryAttention is grouped-query attention over a prefill written as a
plain Python loop over its query heads (each head MatMul, Scale, Softmax, MatMul over its key/value
head). The script checks reference() against the same attention in float64 numpy (bfloat16:
rtol 2e-2, atol 2e-2) and the compiled design against reference() (rtol 1e-2, atol 1e-2), then
prints how many configurations one call takes, describe()'s segments and repeat_over_time lines, and the cost model's
estimate of a call beside its roofline bound. `--svg PATH` draws the placement. Exit 1 on a
mismatch.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import aie_utils
from iron.models.designs import GroupedQueryAttention, numpy_attention

HEADS, KV_HEADS, POSITIONS, HEAD_DIM = 32, 8, 64, 64


def section(text: str, title: str) -> list[str]:
    """The lines of one `title:` section of describe()'s text (none when it has none)."""
    lines = text.splitlines()
    if f"{title}:" not in lines:
        return []
    start = lines.index(f"{title}:")
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("  ")), len(lines))
    return lines[start:end]


def close(label: str, got, want, tol: float) -> bool:
    worst = max(float(np.abs(np.asarray(g, np.float64) - np.asarray(w, np.float64)).max()) for g, w in zip(got, want))
    ok = all(np.allclose(np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=tol, atol=tol)
             for g, w in zip(got, want))
    print(f"{label}: {len(got)} heads, largest difference {worst:.4f} -> "
          f"{'matches' if ok else 'DIFFERS from'} (rtol {tol}, atol {tol})")
    return ok


def arguments(doc: str, argv) -> argparse.Namespace:
    """--device (set as the current device) and --svg, the two options of this section's designs."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--device", default="npu2", help="npu1, npu2 or a partition such as npu2_4col")
    parser.add_argument("--svg", metavar="PATH", help="draw the placement into this SVG file")
    args = parser.parse_args(argv)
    aie_utils.set_current_device(aie_utils.from_name(args.device))
    return args


def show(compiled, what: str, inputs, svg: str | None) -> None:
    """The configurations a call of `compiled` takes, describe()'s segments and its lines of the
    rule `repeat_over_time`, the estimate of a call on `inputs` and, with `svg`, the placement."""
    count = len(compiled.plan.configurations)
    print(f"{what}: {count} configuration{'' if count == 1 else 's'} per call")
    text = compiled.describe()
    print("\n".join(section(text, "segments") + [line for line in section(text, "rules")
                                                if line.lstrip().startswith("repeat_over_time")]))
    print(f"estimate: {compiled.estimate(*inputs)}")
    if svg:
        compiled.svg(svg)
        print(f"the placement, drawn: {svg}")


def main(argv=None) -> int:
    args = arguments(__doc__, argv)

    graph = GroupedQueryAttention(HEADS, KV_HEADS, POSITIONS, HEAD_DIM)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(shape).astype(dtype) for shape, dtype in graph.specs().values()]
    want = graph.reference(*inputs)
    ok = close("reference vs numpy (float64)", want, numpy_attention(graph, *inputs), 2e-2)
    compiled = graph.compile(**graph.specs())
    ok &= close(f"compiled ({compiled.device.name}) vs reference", compiled(*inputs), want, 1e-2)
    show(compiled, f"{HEADS} heads over {POSITIONS} positions", inputs, args.svg)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
