"""SmolLM2-135M's plain numpy forward: seconds per token, the baseline iron's design of the model
will be timed against (as a ratio, in this same process, once it exists).

Prints the load time, the greedy continuation of a prompt, the seconds per token of all 30
layers (generate() over a 5-token prompt and 32 new tokens, best of 3 runs, per token fed) and
the weight bytes one token reads as float32 and as the file's Q4_1 / Q8_0 blocks.
"""
import math
import time

from iron.models import numpy_forward as nf
from iron.models import smollm2

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


if __name__ == "__main__":
    main()
