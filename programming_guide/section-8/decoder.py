"""Section 8, a decoder: a small transformer generating tokens greedily as a device loop.

Defines `Decoder`, a decoder-only transformer in float32 with seeded random weights (nothing is
downloaded): token embedding (an iron.weight gathered by the carried token) plus position
embedding (gathered by the carried position), `--layers` blocks of RMSNorm, single-head
attention over a KV cache held in iron.state (k written to kcache[pos], v to vcache[:, pos],
stored transposed; scores = kcache @ q, scaled; Softmax over the first pos + 1; context = vcache
@ p), a SiLU MLP, then a final RMSNorm, the LM head and Argmax: the next token. Carried: `pos`
and `tok`. body() takes an optional tensor `x` (a token's embedding row, emb[token] computed on
the host): the version compiled with x feeds the prompt; the version without it generates.

It generates `--tokens` tokens after the prompt four ways and checks they agree token for token:
plain numpy (`numpy_generate`), the graph's reference (host-driven), the compiled graph
host-driven (feeding each Carry back), and `iron.CarriedLoop(first, body, depth=--depth)` where
the last prompt token starts the loop (full-ELF devices only). It prints the tokens and the
tokens per second host-driven vs device loop, measured in this run on the current backend.
Exit 1 on any disagreement. It does no sampling other than greedy and loads no real model.
`--width`, `--hidden`, `--context` and `--vocab` size the model; a decoder that needs more of the
array than the device has compiles as segments run one after another within each call (section 9),
and the compile line counts the compute tiles of each segment.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import aie_utils
import iron
from iron import Carried
from iron.errors import DoesNotFit, PlacementError
from iron.kernels import Add, Argmax, Copy, MatVec, RMSNorm, Scale, SiLU, Softmax
from iron.runtime.backend import select_backend

VOCAB, WIDTH, HIDDEN, CONTEXT = 64, 32, 64, 32
EPS = 1e-5
PROMPT = (5, 17, 42, 8)
REPEATS = 3   # timings are the best of this many generations


def random_matrix(rng, rows: int, cols: int) -> np.ndarray:
    return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)


def random_gain(rng, n: int) -> np.ndarray:
    return (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)


class Block:
    """One transformer block: its params and its KV cache (states), and the kernels of one step."""

    def __init__(self, rng, width: int, hidden: int, context: int):
        self.attn_norm, self.mlp_norm = iron.param(random_gain(rng, width)), iron.param(random_gain(rng, width))
        self.wq, self.wk, self.wv, self.wo = (iron.param(random_matrix(rng, width, width)) for _ in range(4))
        self.w1, self.w2 = iron.param(random_matrix(rng, hidden, width)), iron.param(random_matrix(rng, width, hidden))
        self.kcache = iron.state((context, width), np.float32)
        self.vcache = iron.state((width, context), np.float32)
        self.scale = float(1 / np.sqrt(width))

    def step(self, x, pos):
        """x + attention(x), then + MLP: records the kernel calls of one position."""
        h = RMSNorm.step(x, self.attn_norm, eps=EPS)
        q = MatVec.step(self.wq, h)
        Copy.step(MatVec.step(self.wk, h), out=self.kcache[pos])
        Copy.step(MatVec.step(self.wv, h), out=self.vcache[:, pos])
        scores = Scale.step(MatVec.step(self.kcache, q), factor=self.scale)
        p = Softmax.step(scores, length=pos + 1)
        x = Add.step(x, MatVec.step(self.wo, MatVec.step(self.vcache, p)))
        u = SiLU.step(MatVec.step(self.w1, RMSNorm.step(x, self.mlp_norm, eps=EPS)))
        return Add.step(x, MatVec.step(self.w2, u))


class Decoder(iron.Graph):
    """One decoding step: the token at `pos` in, the next token out (carried, and recorded in
    `tokens[pos]`). Given `x` (the token's embedding row), it uses x instead of gathering it."""

    def __init__(self, layers: int = 1, seed: int = 0, vocab: int = VOCAB, width: int = WIDTH,
                 hidden: int = HIDDEN, context: int = CONTEXT):
        rng = np.random.default_rng(seed)
        self.tok_emb = iron.weight(rng.standard_normal((vocab, width)).astype(np.float32))
        self.pos_emb = iron.weight((0.5 * rng.standard_normal((context, width))).astype(np.float32))
        self.blocks = [Block(rng, width, hidden, context) for _ in range(layers)]
        self.final_norm = iron.param(random_gain(rng, width))
        self.lm_head = iron.param(random_matrix(rng, vocab, width))
        self.tokens = iron.state((context,), np.int32, name="tokens")

    def embed(self, token: int) -> np.ndarray:
        """A token's embedding row, computed on the host: what the prompt version takes as x."""
        return self.tok_emb.array[token].copy()

    def body(self, x=None, *, pos: Carried[np.int32], tok: Carried[np.int32]):
        if x is None:
            x = Add.step(self.tok_emb[tok], self.pos_emb[pos])
        else:
            x = Add.step(x, self.pos_emb[pos])
        for block in self.blocks:
            x = block.step(x, pos)
        logits = MatVec.step(self.lm_head, RMSNorm.step(x, self.final_norm, eps=EPS))
        nxt = Argmax.step(logits)
        Copy.step(nxt, out=self.tokens[pos])
        return iron.carry(pos=pos + 1, tok=nxt)


# ---- the same transformer in plain numpy -------------------------------------------------------

def numpy_rmsnorm(x, g):
    return x / np.sqrt(np.mean(x * x) + np.float32(EPS)) * g


def numpy_generate(model: Decoder, prompt, count: int) -> tuple[list[int], float]:
    """Greedy generation written out in numpy: (the `count` tokens after the prompt, the smallest
    gap between the best and second-best logit over every step, how safe argmax is from rounding)."""
    caches = [(np.zeros(b.kcache.shape, np.float32), np.zeros(b.vcache.shape, np.float32)) for b in model.blocks]
    sequence, margin = list(prompt), np.inf
    for pos in range(len(prompt) + count - 1):
        x = model.tok_emb.array[sequence[pos]] + model.pos_emb.array[pos]
        for block, (kc, vc) in zip(model.blocks, caches):
            x = numpy_block(block, kc, vc, x, pos)
        logits = model.lm_head.array @ numpy_rmsnorm(x, model.final_norm.array)
        second, best = np.sort(logits)[-2:]
        margin = min(margin, float(best - second))
        if pos + 1 == len(sequence):
            sequence.append(int(np.argmax(logits)))
    return sequence[len(prompt):], margin


def numpy_block(block: Block, kc, vc, x, pos: int):
    h = numpy_rmsnorm(x, block.attn_norm.array)
    q = block.wq.array @ h
    kc[pos], vc[:, pos] = block.wk.array @ h, block.wv.array @ h
    scores = (kc[: pos + 1] @ q) * np.float32(block.scale)
    e = np.exp(scores - scores.max())
    x = x + block.wo.array @ (vc[:, : pos + 1] @ (e / e.sum()))
    y = block.w1.array @ numpy_rmsnorm(x, block.mlp_norm.array)
    return x + block.w2.array @ (y / (1 + np.exp(-y)))


# ---- generating with iron ------------------------------------------------------------------------

def feed_prompt(model: Decoder, first, prompt) -> None:
    """Run the prompt tokens host-driven through the tensor-taking version (fills the KV caches)."""
    for pos, token in enumerate(prompt):
        first(model.embed(token), pos=pos, tok=token)


def host_driven(model: Decoder, first, body, prompt, count: int) -> list[int]:
    """The last prompt token through `first`, then `count - 1` calls of `body`, each fed the
    previous Carry: the `count` generated tokens."""
    nxt = first(model.embed(prompt[-1]), pos=len(prompt) - 1, tok=prompt[-1])
    tokens = [int(nxt["tok"])]
    for _ in range(count - 1):
        nxt = body(**nxt)
        tokens.append(int(nxt["tok"]))
    return tokens


def device_loop(model: Decoder, first, body, prompt, count: int, depth: int) -> list[int]:
    """The last prompt token starts a CarriedLoop; the tokens are read back from `tokens`."""
    start = len(prompt) - 1
    loop = iron.CarriedLoop(first, body, depth=depth)
    for _ in loop.run(count - 1, model.embed(prompt[-1]), pos=start, tok=prompt[-1]):
        pass
    return body.read("tokens")[start: start + count].tolist()


def measured(model: Decoder, first, prompt, generate) -> tuple[list[int], float]:
    """Feed every prompt token but the last, then time `generate()`; REPEATS times. Returns the
    tokens (a list of every repeat's tokens if two repeats disagree) and the best tokens/s.
    Each repeat rewrites the same KV cache rows, so each must generate the same tokens."""
    results, best = [], 0.0
    for _ in range(REPEATS):
        feed_prompt(model, first, prompt[:-1])
        began = time.perf_counter()
        results.append(generate())
        best = max(best, len(results[-1]) / (time.perf_counter() - began))
    consistent = all(tokens == results[0] for tokens in results)
    return (results[0] if consistent else results), best


def compile_versions(model: Decoder):
    """(first, body): body takes no tensor; first takes x and is compiled to start body."""
    body = model.compile()
    first = model.compile(x=((model.tok_emb.shape[1],), np.float32), feeds=body)
    return first, body


def tiles_text(compiled) -> str:
    """`on 27` or `in 3 segments on 30 + 30 + 8`: the compute tiles of each configuration."""
    counts = [len(plan.cores) for plan in compiled.plan.configurations]
    if len(counts) == 1:
        return f"on {counts[0]}"
    return f"in {len(counts)} segments on {' + '.join(map(str, counts))}"


def report(label: str, tokens: list[int], expected: list[int]) -> bool:
    ok = tokens == expected
    print(f"{label}: {tokens} -> {'matches' if ok else 'DIFFERS from'} numpy (token for token)")
    return ok


def run(model: Decoder, prompt, count: int, depth: int, describe: bool = False, svg: str | None = None) -> int:
    """Generate with every path, check them against numpy, print tokens and tokens/s (and draw the
    body's placement into `svg`, when given); exit code."""
    expected, margin = numpy_generate(model, prompt, count)
    print(f"prompt {list(prompt)}; numpy generates {expected} (smallest top-2 logit gap {margin:.3g})")
    feed_prompt(model, model.reference, prompt[:-1])
    ok = report("reference (host-driven)", host_driven(model, model.reference, model.reference, prompt, count),
                expected)

    first, body = compile_versions(model)
    device = body.device
    print(f"compiled for {device.name}: body {tiles_text(body)} of {len(device.compute_tiles)} compute tiles, "
          f"first {tiles_text(first)}")
    if describe:
        print(body.describe())
    if svg is not None:
        body.svg(svg)
        print(f"the body's placement, drawn: {svg}")
    backend = select_backend()
    tokens, host_rate = measured(model, first, prompt, lambda: host_driven(model, first, body, prompt, count))
    ok &= report(f"host-driven ({device.name})", tokens, expected)
    if not body.plan.full_elf:
        print(f"{device.name} has no full ELF: no device loop; host-driven {host_rate:.0f} tokens/s on the {backend}")
        return 0 if ok else 1
    tokens, loop_rate = measured(model, first, prompt,
                                 lambda: device_loop(model, first, body, prompt, count, depth))
    ok &= report(f"device loop ({device.name}, depth {depth})", tokens, expected)
    print(f"tokens per second on the {backend}: host-driven {host_rate:.0f}, device loop {loop_rate:.0f} "
          f"({loop_rate / host_rate:.2f}x)")
    if backend == "emulator":
        print(estimated(model, first, body, prompt, count))
    return 0 if ok else 1


def estimated(model: Decoder, first, body, prompt, count: int) -> str:
    """Estimated NPU tokens per second from iron's cost model (the timed emulator): one
    host-driven generation step, and the device loop per step at depth 1, 2 and 4, with
    vectorised kernels and (host-driven, depth 2) with iron's kernels as written; the step's
    roofline bound and the share of it reached."""
    start = len(prompt) - 1
    feed_prompt(model, first, prompt[:-1])
    host = body.estimate(pos=start, tok=prompt[-1])
    rates = {}
    for depth in (1, 2, 4):
        feed_prompt(model, first, prompt[:-1])
        loop = iron.CarriedLoop(first, body, depth=depth)
        rates[depth] = loop.estimate(count - 1, model.embed(prompt[-1]), pos=start, tok=prompt[-1])
    loops = ", ".join(f"depth {d} {1e9 / e.call_ns:.0f}" for d, e in rates.items())
    best = max(rates.values(), key=lambda e: 1e9 / e.call_ns)
    return (f"estimated NPU tokens per second (cost model, not measured): host-driven {1e9 / host.call_ns:.0f}, "
            f"device loop {loops} ({host.call_ns / best.call_ns:.2f}x) with vectorised kernels (the roofline); "
            f"host-driven {1e9 / host.written_ns:.0f}, device loop depth 2 {1e9 / rates[2].written_ns:.0f} with iron's "
            f"kernels; a step takes {host.device_ns / 1000:.1f} us on the device, bottleneck {host.busiest} busy "
            f"{100 * host.share:.0f}% of it, {100 * host.reached:.0f}% of its roofline bound ({host.bound.ns / 1000:.2f} us)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="npu2", help="npu1, npu2 or a partition such as npu2_4col")
    parser.add_argument("--tokens", type=int, default=24, help="how many tokens to generate")
    parser.add_argument("--layers", type=int, default=1, help="transformer blocks")
    parser.add_argument("--width", type=int, default=WIDTH, help="the model width (embedding size)")
    parser.add_argument("--hidden", type=int, default=HIDDEN, help="the MLP's hidden size")
    parser.add_argument("--context", type=int, default=CONTEXT, help="positions the KV cache holds")
    parser.add_argument("--vocab", type=int, default=VOCAB, help="tokens in the vocabulary")
    parser.add_argument("--depth", type=int, default=2, help="runs kept in flight by the device loop")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    parser.add_argument("--prompt", default=",".join(map(str, PROMPT)), help="comma-separated token ids")
    parser.add_argument("--describe", action="store_true", help="print compiled.describe() of the body")
    parser.add_argument("--svg", metavar="PATH", help="draw the body's placement into this SVG file")
    args = parser.parse_args(argv)
    aie_utils.set_current_device(aie_utils.from_name(args.device))
    prompt = tuple(int(t) for t in args.prompt.split(","))
    if len(prompt) + args.tokens - 1 > args.context:
        parser.error(f"the prompt ({len(prompt)} tokens) + --tokens ({args.tokens}) - 1 must be at most "
                     f"{args.context}, the decoder's context: generate fewer tokens")
    if max(prompt) >= args.vocab:
        parser.error(f"the prompt's tokens must be below --vocab ({args.vocab})")
    model = Decoder(args.layers, args.seed, args.vocab, args.width, args.hidden, args.context)
    try:
        return run(model, prompt, args.tokens, args.depth, args.describe, args.svg)
    except (PlacementError, DoesNotFit) as refused:
        print(f"the decoder does not fit {args.device}: {type(refused).__name__}: {refused}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
