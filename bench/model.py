"""SmolLM2-135M: the plain numpy forward's seconds per token, and iron's design of the model
(iron.smollm2_graph) timed against it as ratios, in this same process.

Prints the load time, the greedy continuation of a prompt, the seconds per token of all 30
layers (generate() over a 5-token prompt and 32 new tokens, best of 3 runs, per token fed), the
weight bytes one token reads as float32 and as the file's Q4_1 / Q8_0 blocks; then, for all 30
layers, the cold compile time of the design for npu2 (wall and CPU seconds, against the target
of 5 s, and its segments), and seconds per token (one call, best of CALLS after a first call
that writes the weights) of reference() with float32 and with quantized weights and of the
compiled design on the emulator (float32 weights: the quantized design does
not compile yet, its Dequant of a whole matrix does not fit a tile), each / the numpy forward.
"""
import math
import os
import tempfile
import time

import aie_utils
from iron.errors import DoesNotFit
from iron.models import numpy_forward as nf
from iron.models import smollm2
from iron.smollm2_graph import SmolLM2Graph

CALLS = 3
COMPILE_TARGET = 5.0   # seconds, cold (issue 14)

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
    """Seconds of one call of `step` at position 1, best of CALLS, after a first call."""
    step(pos=0, tok=token)
    best = float("inf")
    for _ in range(CALLS):
        t = time.perf_counter()
        step(pos=1, tok=token)
        best = min(best, time.perf_counter() - t)
    return best


def iron_design(model, prompt, numpy_per_token: float):
    aie_utils.set_current_device(aie_utils.from_name("npu2"))
    os.environ.setdefault("IRON_BACKEND", "emulator")
    graph, quantized = SmolLM2Graph(model), SmolLM2Graph(model, quantized=True)
    with tempfile.TemporaryDirectory() as cold:
        os.environ["IRON_CACHE_DIR"] = cold
        t, cpu = time.perf_counter(), time.process_time()
        body = graph.compile()
        seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
        print(f"compile the 30-layer design for npu2, cold: {seconds:6.2f} s ({cpu:.2f} s of CPU), "
              f"{seconds / COMPILE_TARGET:4.2f}x the target of {COMPILE_TARGET:.0f} s; "
              f"{len(body.plan.configurations)} segments")
        rows = [("reference(), float32 weights", graph.reference), ("reference(), quantized weights", quantized.reference),
                ("emulator, float32 weights", body)]
        for label, step in rows:
            seconds = per_call(step, prompt[0])
            print(f"{label:32s}: {seconds:7.3f} s/token = {seconds / numpy_per_token:6.1f}x the numpy forward")
        try:
            quantized.compile()
        except DoesNotFit as refused:
            print(f"emulator, quantized weights: not compiled ({str(refused).split('. ')[0]})")


if __name__ == "__main__":
    main()
