"""SmolLM2-135M: the plain numpy forward's seconds per token, and iron's design of the model
(iron.models.smollm2_graph) timed against it as ratios, in this same process.

Prints the load time, the greedy continuation of a prompt, the seconds per token of all 30
layers (generate() over a 5-token prompt and 32 new tokens, best of 3 runs, per token fed), the
weight bytes of the file as float32 and as its Q4_1 / Q8_0 blocks; then the cold compile time of
the 30-layer design for npu2 (each in a fresh process, so no Plan and no remembered grid of an
earlier compile answers it; the model's load not counted): float32 and quantized, and with fused
attention (one Attention call per key/value head, a context of FUSED_CONTEXT positions) float32
and quantized, wall and CPU seconds against the target of 1 s, with configurations per token;
for the first 2 and all 30 layers, the bytes one token moves from DDR (describe()'s "DDR per
call") with float32 and with quantized weights (the blocks expanded on the tiles:
`dequant_before_matvec`); then seconds per token (one call, best of CALLS after WARM first
calls: the first writes the weights, and the emulator runs its first launches task by task until
they repeat, replaying them from then on) of reference() and of the compiled design on the
emulator, float32 and quantized, each / the numpy forward (the target with quantized weights: at
most 10x); last, for each compiled design (fused too), the cost model's figures per token:
configurations, DDR bytes, estimated tokens/s with vectorised kernels and with iron's, the
roofline bound and the share of it reached, beside issue 26's targets (quantized: at most 4
configurations per token and at least 300 tokens/s with vectorised kernels; float32 at least 60;
never above the bound). `--cold LABEL` prints one design's cold compile line, `--estimate LABEL`
its cost model line.
"""
import importlib
import math
import os
import subprocess
import sys
import tempfile
import time

import aie_utils
from iron.models import numpy_forward as nf
from iron.models import smollm2
from iron.models.smollm2_graph import FUSED_CONTEXT, SmolLM2Graph
from iron.plan.describe import ddr_traffic

CALLS = 3
WARM = 4   # the emulator's launches repeat from the 2nd on, in a cycle of 2: replayed from the 4th
COMPILE_TARGET = 1.0   # seconds, cold (issue 26: the repeated layer compiled once)
TARGETS = {"float32": 60, "quantized": 300}   # estimated tokens/s with vectorised kernels (issue 26)
MOST_CONFIGURATIONS = 4   # per token, quantized (issue 26)

PROMPT, STEPS = "Once upon a time,", 32


def main():
    t = time.perf_counter()
    model = smollm2.load()
    print(f"load SmolLM2-135M: {time.perf_counter() - t:6.2f} s (read, check, dequantize)")
    prompt = model.tokenizer.encode(PROMPT)
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        out = nf.generate(model, prompt, STEPS)
        best = min(best, time.perf_counter() - t)
    print(f"{PROMPT!r} ->{model.tokenizer.decode(out)!r}")
    per_token = best / (len(prompt) + STEPS - 1)
    print(f"numpy forward: {per_token * 1e3:7.2f} ms/token ({1 / per_token:5.1f} tokens/s)")

    as_float = sum(4 * math.prod(t.shape) for t in model.tensors.values())
    as_blocks = sum(t.data.nbytes for t in model.tensors.values())
    print(f"weight bytes per token: float32 {as_float / 1e6:6.1f} MB, as shipped "
          f"{as_blocks / 1e6:6.1f} MB ({as_float / as_blocks:4.1f}x fewer)")
    iron_design(model, prompt, per_token)


def per_call(step, token: int) -> float:
    """Seconds of one call of `step` at position WARM, best of CALLS, after WARM first calls."""
    for pos in range(WARM):
        step(pos=pos, tok=token, end=0)
    best = float("inf")
    for _ in range(CALLS):
        t = time.perf_counter()
        step(pos=WARM, tok=token, end=0)
        best = min(best, time.perf_counter() - t)
    return best


DESIGNS = {   # label -> SmolLM2Graph's keywords
    "float32": {}, "quantized": {"quantized": True},
    "fused float32": {"context": FUSED_CONTEXT, "fused": True},
    "fused quantized": {"context": FUSED_CONTEXT, "fused": True, "quantized": True},
}


def iron_design(model, prompt, numpy_per_token: float):
    aie_utils.set_current_device(aie_utils.from_name("npu2"))
    os.environ.setdefault("IRON_BACKEND", "emulator")
    for label in DESIGNS:
        print(cold_compile(label), flush=True)
    graph, quantized = SmolLM2Graph(model), SmolLM2Graph(model, quantized=True)
    rows = [("reference(), float32 weights", graph.reference), ("reference(), quantized weights", quantized.reference)]
    rows += [(label, design.compile()) for label, design in (("float32", graph), ("quantized", quantized))]
    two = [SmolLM2Graph(smollm2.load(layers=2), quantized=q).compile().plan for q in (False, True)]
    for layers, plans in ((2, two), (30, [body.plan for _, body in rows[2:]])):
        traffic = [ddr_traffic(plan) for plan in plans]
        print(f"{layers:2d} layers, DDR bytes per token: float32 weights {traffic[0].read / 1e6:6.1f} MB "
              f"({traffic[0].consts / 1e6:6.1f} MB weights), quantized {traffic[1].read / 1e6:6.1f} MB "
              f"({traffic[1].consts / 1e6:6.1f} MB weights): {traffic[0].consts / traffic[1].consts:4.1f}x fewer")
    for label, step in rows:
        seconds = per_call(step, prompt[0])
        label = label if label.startswith("reference") else f"emulator, {label} weights"
        print(f"{label:32s}: {seconds:7.3f} s/token = {seconds / numpy_per_token:6.1f}x the numpy forward")
    rows += [(label, SmolLM2Graph(model, **DESIGNS[label]).compile()) for label in ("fused float32", "fused quantized")]
    for label, body in rows[2:]:   # after the timing: estimate() keeps the emulator on the cost model's clock
        print(estimated(label, body, prompt[0]))


def cold_compile(label: str) -> str:
    """The line of the cold compile of design `label`, compiled by a fresh process."""
    done = subprocess.run([sys.executable, __file__, "--cold", label], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def compile_cold(label: str) -> str:
    """Compile design `label` of the 30-layer model for npu2 in this process, with a cache
    directory of its own: its line (wall and CPU seconds, configurations). The compiler's modules
    are imported first: where Python writes no bytecode (PYTHONDONTWRITEBYTECODE) every process
    compiles their source, about 0.5 s that is not iron's compile."""
    aie_utils.set_current_device(aie_utils.from_name("npu2"))
    graph = SmolLM2Graph(smollm2.load(), **DESIGNS[label])
    importlib.import_module("iron.compiler.compile")   # Python's import, not iron's compile: untimed
    with tempfile.TemporaryDirectory() as cold:
        os.environ["IRON_CACHE_DIR"] = cold
        t, cpu = time.perf_counter(), time.process_time()
        body = graph.compile()
        seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
    return (f"compile the 30-layer design ({label} weights) for npu2, cold: {seconds:6.2f} s ({cpu:.2f} s of CPU) = "
            f"{seconds / COMPILE_TARGET:4.2f}x the target of {COMPILE_TARGET:.0f} s; "
            f"{len(body.plan.configurations)} configurations")


def estimated(label: str, body, token: int) -> str:
    """The cost model's figures for one token of the compiled design on npu2 (host-driven)."""
    e = body.estimate(pos=WARM, tok=token, end=0)
    most = f" (target at most {MOST_CONFIGURATIONS})" if label.endswith("quantized") else ""
    return (f"{label} weights: {len(body.plan.configurations)} configurations per token{most}, "
            f"{e.bound.ddr_bytes / 1e6:.1f} MB from and to DDR per token; estimated {1e9 / e.call_ns:.1f} tokens/s "
            f"with vectorised kernels (the roofline; target at least {TARGETS[label.split()[-1]]}), {1e9 / e.written_ns:.2f} "
            f"tokens/s with iron's kernels; bound {1e9 / e.bound.ns:.0f} tokens/s ({e.bound}): the design reaches "
            f"{100 * e.reached:.0f}% of it")


def estimate_one(label: str) -> str:
    """The cost model's line of design `label` alone (`--estimate LABEL`), for one variant."""
    aie_utils.set_current_device(aie_utils.from_name("npu2"))
    os.environ.setdefault("IRON_BACKEND", "emulator")
    model = smollm2.load()
    body, token = SmolLM2Graph(model, **DESIGNS[label]).compile(), model.tokenizer.encode(PROMPT)[0]
    for pos in range(WARM):   # as main() estimates after its timed calls
        body(pos=pos, tok=token, end=0)
    return estimated(label, body, token)


if __name__ == "__main__":
    if sys.argv[1:2] in (["--cold"], ["--estimate"]):
        print((compile_cold if sys.argv[1] == "--cold" else estimate_one)(sys.argv[2]))
    else:
        main()
