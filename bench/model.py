"""SmolLM2-135M's plain numpy forward: seconds per token, the baseline iron's design of the model
will be timed against (as a ratio, in this same process, once it exists).

Prints the load time, the greedy continuation of a prompt, the seconds per token (best and median
of single steps at positions 8..39, all 30 layers) and the weight bytes one token reads as float32
and as the file's Q4_1 / Q8_0 blocks.
"""
import math
import statistics
import time

from iron.models import numpy_forward as nf
from iron.models import smollm2

PROMPT = "Once upon a time,"


def main():
    t = time.perf_counter()
    model = smollm2.load()
    print(f"load SmolLM2-135M: {time.perf_counter() - t:6.2f} s (read, check, dequantize)")
    prompt = model.tokenizer.encode(PROMPT)
    print(f"{PROMPT!r} ->{model.tokenizer.decode(nf.generate(model, prompt, 16))!r}")

    cache = nf.KVCache.empty(model.config, 64)
    token, times = prompt[0], []
    for pos in range(40):
        t = time.perf_counter()
        token = int(nf.step(model.weights, model.config, cache, token, pos).argmax())
        times.append(time.perf_counter() - t)
    steady = times[8:]
    print(f"numpy forward: {min(steady) * 1e3:7.2f} ms/token best, "
          f"{statistics.median(steady) * 1e3:7.2f} ms/token median "
          f"({1 / statistics.median(steady):5.1f} tokens/s)")

    as_float = sum(4 * math.prod(t.shape) for t in model.tensors.values())
    as_blocks = sum(t.data.nbytes for t in model.tensors.values())
    print(f"weight bytes per token: float32 {as_float / 1e6:6.1f} MB, as shipped "
          f"{as_blocks / 1e6:6.1f} MB ({as_float / as_blocks:4.1f}x fewer)")


if __name__ == "__main__":
    main()
