"""Issue 26's repeated-block designs at full size (iron.models.designs): grouped-query attention
(8 heads over 512 positions, head 64, bfloat16: a loop over heads), a ResNet bottleneck block on
32x32x256 uint8 (its 3x3 convolution a loop over row blocks) and a 3x3 edge filter over a 1080p
image (a loop over row blocks), each compiled for npu2 and npu1 and estimated by the cost model
(the timed emulator): configurations per call, the estimated time per call with vectorised
kernels (the roofline) and with iron's kernels as written, the call's roofline bound (DDR bytes
at DDR's bandwidth, or MACs at the array's peak) and the share of it the design reaches; beside
each, its figures before issue 26 (repetition over time; the issue's for the edge filter),
and how many times faster it is now (the targets: at most 2 configurations per call on npu2, at
least 10x faster on npu1). `python bench/designs.py gqa npu1` runs one design, one device.
Each design and device is measured in a process of its own, given at most LIMIT seconds.
"""
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

import aie_utils
from iron.models.designs import Bottleneck, EdgeFilter, GroupedQueryAttention, with_halo

DEVICES = ("npu2", "npu1")
LIMIT = 180   # seconds per design and device: one the compiler takes longer over is reported as such


@dataclass(frozen=True)
class Before:
    """A design's figures on one device before issue 26 (repetition over time): configurations per
    call and the estimate with vectorised kernels, in ms, as measured with these designs then."""
    configurations: int
    ms: float


@dataclass(frozen=True)
class Design:
    """A design at full size, its inputs, and its figures before issue 26 by device."""
    name: str
    label: str
    make: Callable
    inputs: Callable
    before: dict


def attention_inputs(graph):
    rng = np.random.default_rng(0)
    return [rng.standard_normal(shape).astype(dtype) for shape, dtype in graph.specs().values()]


def bottleneck_inputs(graph):
    picture = np.random.default_rng(0).integers(0, 256, (graph.side, graph.side, graph.channels), dtype=np.uint8)
    return [with_halo(picture).reshape(-1, graph.channels)]


def image_inputs(graph):
    return [with_halo(np.random.default_rng(0).integers(0, 256, (graph.height, graph.width, 1), dtype=np.uint8))]


DESIGNS = (
    Design("gqa", "grouped-query attention, 8 heads x 512 positions x 64, bf16", GroupedQueryAttention,
           attention_inputs, {"npu2": Before(49, 5.85), "npu1": Before(56, 1122.0)}),
    Design("bottleneck", "ResNet bottleneck block, 32x32x256 uint8", Bottleneck, bottleneck_inputs,
           {"npu2": Before(10, 1.42), "npu1": Before(12, 241.0)}),
    Design("edges", "3x3 edge filter, 1080p, row blocks", EdgeFilter, image_inputs,
           {"npu2": Before(10, 1.7)}),   # npu1: the issue gives no figure
)


def measure(design: Design, device: str) -> str:
    aie_utils.set_current_device(aie_utils.from_name(device))
    graph = design.make()
    inputs = design.inputs(graph)
    began = time.perf_counter()
    compiled = graph.compile(*inputs)
    seconds = time.perf_counter() - began
    e = compiled.estimate(*inputs)
    before = design.before.get(device)
    than = "" if before is None else (f" (before issue 26: {before.configurations} configurations, {before.ms} ms: "
                                      f"{before.ms * 1e6 / e.call_ns:.1f}x faster)")
    return (f"{design.label} on {device}: {len(compiled.plan.configurations)} configurations per call "
            f"(compiled in {seconds:.1f} s); estimated {e.call_ns / 1e6:.3f} ms per call with vectorised kernels "
            f"(the roofline), {e.written_ns / 1e6:.3f} ms with iron's kernels{than}; {e.bound}: the design "
            f"reaches {100 * e.reached:.0f}% of it")


def measured_apart(design: Design, device: str) -> str:
    """measure() in a process of its own, or why it gave no line within LIMIT seconds."""
    try:
        done = subprocess.run([sys.executable, __file__, "--one", design.name, device], capture_output=True,
                              text=True, timeout=LIMIT)
    except subprocess.TimeoutExpired:
        return f"{design.label} on {device}: not compiled and estimated within {LIMIT} s"
    return done.stdout.strip() or f"{design.label} on {device}: failed\n{done.stderr.strip()}"


def main(argv) -> int:
    os.environ.setdefault("IRON_BACKEND", "emulator")
    by_name = {d.name: d for d in DESIGNS}
    if argv[:1] == ["--one"]:
        print(measure(by_name[argv[1]], argv[2]))
        return 0
    names = [a for a in argv if a in by_name] or list(by_name)
    devices = [a for a in argv if a in DEVICES] or list(DEVICES)
    print("targets (issue 26): at most 2 configurations per call on npu2; on npu1 at least 10x faster estimated")
    for name in names:
        for device in devices:
            print(measured_apart(by_name[name], device), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
