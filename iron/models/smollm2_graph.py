"""SmolLM2-135M as an iron.Graph: one decoding step of the real model, the token at the carried
`pos` in and the greedy next token out (carried as `tok` and recorded in the `tokens` state).

Each block is RMSNorm, the Q/K/V projections, RoPE at `pos`, K and V written into per-layer KV
caches held in iron.state at `pos` (keys as rows, values transposed, one cache per key/value
head), per-head attention over the first pos + 1 cache rows (query head h reads key/value head
h // 3), the output projection and residual, then RMSNorm, SwiGLU and residual. The token's
embedding is gathered from the table by `tok`; the same table is the tied LM head. `tokens`
holds the text by position: the next token is read from it, so a prompt written there by the
first version (the graph given the prompt's ids, compiled with feeds= the body) is fed by the
body itself up to the carried `end`, after which each step's argmax is written and read. The
prompt is thus fed host-driven, one call per token, or loaded, and a whole generation is one
CarriedLoop. iron.models.numpy_forward is the oracle it is checked against.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

import iron
from iron import Carried
from iron.errors import ArgumentError, TokenError
from iron.kernels import (
    Add,
    Argmax,
    ArgmaxBlocks,
    Attention,
    Cast,
    Copy,
    Dequant,
    MatVec,
    Max,
    Mul,
    QMatVec,
    RMSNorm,
    RoPE,
    Scale,
    SiLU,
    Softmax,
    concat,
)
from iron.models.smollm2 import SmolLM2
from iron.models.tokenizer import check_tokens
from iron.runtime.compiled import CompiledGraph

CONTEXT = 256
BLOCK = 4096   # logits per Argmax: a 49152-wide row does not fit one tile's 64 KiB
# The LM head's MatVec calls, each over its share of the table's rows: a split MatVec takes at
# most the parts one mem tile joins (6), so two spread the 30 MB table over 12 tiles and their
# shim channels, near DDR's bound on npu2 (one: 6 tiles, compute-bound).
HEAD_PIECES = 2
# The most positions whose float32 keys and values (64 KiB at 64 positions of head size 64, with
# a key/value head's queries) the Attention kernel, which does not stream, holds on one tile.
FUSED_CONTEXT = 64


class Matrix:
    """A weight matrix (out, in) as a param: float32, or (quantized) the GGUF blocks of its rows,
    uint8 (out, row bytes), which QMatVec multiplies as stored, expanding each weight as it uses
    it: compiled, the blocks stream to the tiles as stored, so the float32 matrix exists nowhere,
    not even on a tile, and each core reads a weight's 20 (Q4_1) or 34 (Q8_0) bytes per 32, not
    128 (the cost model prices QMatVec below Dequant then MatVec on the same rows, whose tiles
    store the expanded rows and load them again: docs/platform.md section 11)."""

    def __init__(self, model: SmolLM2, names: Sequence[str], quantized: bool):
        tensors = [model.tensors[name] for name in names]
        self.block_bytes = tensors[0].format.nbytes if quantized else None
        self.param = iron.param(np.concatenate([t.data if quantized else t.dequantize() for t in tensors]))

    def times(self, x, rows: slice | None = None):
        """The matrix (its `rows`, when given) times x inside body()."""
        param = self.param if rows is None else self.param[rows]
        if self.block_bytes is None:
            return MatVec.step(param, x)
        return QMatVec.step(param, x, block_bytes=self.block_bytes)


def residual(x, projected, out=None):
    """x + projected (into the state `out`, when given), added in a group of its own after the
    projection's: the residual stream copied first (a Copy reading none of the projection's
    results closes its group), so the projection's MatVec is split over tiles, each part taking
    two input FIFOs, the vector and its rows; with the Add fused after it, each part would take
    the residual as a third, more than a tile's two input channels, and the projection would stay
    on one tile (`unsplit_beside_producer`)."""
    return Add.step(Copy.step(x), projected, out=out)


class Layer:
    """One block's params and KV caches, and the kernel calls of one position: attention as a
    chain of calls per query head (MatVec, Scale, Softmax, MatVec; values cached transposed), or
    `fused`, one Attention call per key/value head (its 3 query heads at once; values cached as
    rows), which makes a layer 15 groups instead of 41."""

    def __init__(self, model: SmolLM2, index: int, context: int, quantized: bool, fused: bool = False):
        config, block = model.config, model.weights.blocks[index]
        self.config, self.fused = config, fused
        self.attn_norm, self.ffn_norm = iron.param(block.attn_norm), iron.param(block.ffn_norm)

        def matrix(*fields):
            return Matrix(model, [f"blk.{index}.{field}.weight" for field in fields], quantized)
        # Q, K and V are one MatVec: one pass over the normalized x, one FIFO out. Gate and up are
        # a MatVec each, reading the same vector: neither waits for the other, so each splits
        # over its own tiles and both run at once (`split_matrix_over_tiles`' share, `Later.stage`)
        self.wqkv, self.wo = matrix("attn_q", "attn_k", "attn_v"), matrix("attn_output")
        self.gate, self.up, self.down = matrix("ffn_gate"), matrix("ffn_up"), matrix("ffn_down")
        d, kv = config.head_dim, config.kv_heads
        # one state per layer for the keys (and one for the values) of every key/value head: a
        # position's keys are written by one Copy, its values by another
        self.keys = iron.state((kv, context, d), np.float32)
        self.values = iron.state((kv, context, d) if fused else (kv, d, context), np.float32)
        # the layer's result, which the next layer (or the final RMSNorm) reads from DDR, as layer
        # 0 reads the embedding: every layer alike, the last one too
        self.output = iron.state((config.width,), np.float32)

    def step(self, x, pos):
        c = self.config
        d, eps, group = c.head_dim, c.rms_eps, c.heads // c.kv_heads
        qkv = self.wqkv.times(RMSNorm.step(x, self.attn_norm, eps=eps))
        q_end, k_end = c.heads * d, (c.heads + c.kv_heads) * d
        rotated = RoPE.step(qkv[:k_end], pos=pos, head_dim=d, base=c.rope_base)   # the query and key heads alike
        q = rotated[:q_end]
        Copy.step(rotated[q_end:].reshape(c.kv_heads, d), out=self.keys[:, pos])
        v = qkv[k_end:].reshape(c.kv_heads, d)
        Copy.step(v, out=self.values[:, pos] if self.fused else self.values[:, :, pos])
        if self.fused:
            heads = [self.attend_group(q[j * group * d:(j + 1) * group * d], j, pos) for j in range(c.kv_heads)]
        else:
            heads = [self.attend(q[i * d:(i + 1) * d], i // group, pos) for i in range(c.heads)]
        x = residual(x, self.wo.times(concat(*heads)))
        h = RMSNorm.step(x, self.ffn_norm, eps=eps)
        u = Mul.step(SiLU.step(self.gate.times(h)), self.up.times(h))
        residual(x, self.down.times(u), out=self.output)
        return self.output

    def attend_group(self, q, kv: int, pos):
        """The query heads of key/value head `kv` (q of all of them, end to end) in one Attention
        call over cache rows 0..pos."""
        group = q.shape[0] // self.config.head_dim
        keys, values = self.keys[kv:kv + 1], self.values[kv:kv + 1]
        return Attention.step(q.reshape(group, -1), keys, values, length=pos + 1).reshape(-1)

    def attend(self, q, kv: int, pos):
        """One query head over key/value head `kv`: softmax(K q / sqrt(d)) over rows 0..pos, then V p."""
        scores = Scale.step(MatVec.step(self.keys[kv], q), factor=1 / np.sqrt(self.config.head_dim))
        return MatVec.step(self.values[kv], Softmax.step(scores, length=pos + 1))


class SmolLM2Graph(iron.Graph):
    """One decoding step of `model` (all its loaded layers) with a KV cache of `context` positions;
    `quantized=True` keeps the matrices and the embedding table as the GGUF file ships them
    (Q4_1 / Q8_0 blocks, about 6x fewer bytes to move per token), multiplied as stored by
    QMatVec (the token's row of the table expanded by Dequant); `fused=True` computes each
    layer's attention with one Attention call per key/value head (a context of at most FUSED_CONTEXT positions, whose cache fits a tile): every
    layer is then the same 15 groups, which the compiler runs over time on the same cores."""

    def __init__(self, model: SmolLM2, context: int = CONTEXT, quantized: bool = False, fused: bool = False):
        config = model.config
        if not 1 <= context <= config.context:
            raise ArgumentError(f"context={context}: the model was trained for contexts up to "
                                f"{config.context} tokens; pass a context in 1..{config.context}.")
        if fused and context > FUSED_CONTEXT:
            raise ArgumentError(f"fused=True with context={context}: the Attention kernel holds a key/value head's "
                                f"cache on one tile, at most {FUSED_CONTEXT} positions; pass a context in "
                                f"1..{FUSED_CONTEXT}, or fused=False.")
        self.config, self.context = config, context
        table = model.tensors["token_embd.weight"]
        self.embedding_bytes = table.format.nbytes if quantized else None
        self.embedding = iron.weight(table.data if quantized else model.weights.token_embd)
        self.embedded = iron.state((config.width,), np.float32)   # the token's embedding (embed)
        self.layers = [Layer(model, i, context, quantized, fused) for i in range(config.layers)]
        self.output_norm = iron.param(model.weights.output_norm)
        self.lm_head = Matrix(model, ["token_embd.weight"], quantized)   # tied: the embedding table
        self.tokens = iron.state((context + 1,), np.int32, name="tokens")   # the text, by position
        self.block_starts = iron.param(np.arange(0, config.vocab, BLOCK, dtype=np.float32))
        self.maxes = iron.state((config.vocab // BLOCK,), np.float32)   # each block's largest logit
        self.found = iron.state((config.vocab // BLOCK,), np.int32)   # where in its block

    def body(self, prompt=None, *, pos: Carried[np.int32], tok: Carried[np.int32], end: Carried[np.int32]):
        if prompt is not None:
            return self.load_prompt(prompt, pos)
        x = self.embed(tok)
        for layer in self.layers:
            x = layer.step(x, pos)
        h = RMSNorm.step(x, self.output_norm, eps=self.config.rms_eps)
        piece = self.config.vocab // HEAD_PIECES
        logits = [self.lm_head.times(h, rows=slice(k * piece, (k + 1) * piece)) for k in range(HEAD_PIECES)]
        # Inside a loaded prompt (pos + 1 < end) the next token is already in `tokens`: the argmax
        # goes to tokens[end], which the step at end - 1 overwrites, and the prompt stays.
        Copy.step(self.argmax(logits), out=self.tokens[iron.max(pos + 1, end)])
        return iron.carry(pos=pos + 1, tok=self.tokens[pos + 1], end=end)

    def embed(self, tok):
        """The token's row of the table (its blocks expanded, quantized) written into the state
        `embedded`, which layer 0 then reads from DDR as each later layer reads the one before's
        result: so every layer is alike, and all of them loop over time on one layer's cores."""
        if self.embedding_bytes is None:
            Copy.step(self.embedding[tok], out=self.embedded)
        else:
            row = self.embedding[tok].reshape(1, -1)
            Dequant.step(row, block_bytes=self.embedding_bytes, out=self.embedded.reshape(1, -1))
        return self.embedded

    def load_prompt(self, prompt, pos):
        """The first version (given the prompt's token ids): write them into `tokens` from `pos`
        and start at the first of them, running no layer; the body then feeds the rest itself."""
        n = prompt.shape[0]
        Copy.step(prompt, out=self.tokens[pos:pos + n])
        return iron.carry(pos=pos, tok=prompt[0], end=pos + n)

    def argmax(self, logits):
        """The first maximum of the logits (the LM head's pieces, end to end), a row wider than a
        tile: Max and Argmax per block of BLOCK logits, then the block whose maximum is first
        largest gives its row index. Each of the reductions streams its rows over the tiles and
        writes its results into a state (`found`, `maxes`), which the last calls read from DDR in
        the same configuration: a streamed result read on the device would end its configuration
        (`stream_row_blocks`)."""
        at = 0
        for piece in logits:
            blocks = piece.reshape(-1, BLOCK)   # a batch of rows: one Max and one Argmax call each
            Argmax.step(blocks, out=self.found[at:at + blocks.shape[0]])
            Max.step(blocks, out=self.maxes[at:at + blocks.shape[0]])
            at += blocks.shape[0]
        found = Cast.step(self.found, dtype=np.float32)
        return ArgmaxBlocks.step(self.maxes, Add.step(found, self.block_starts))

    def check_prompt(self, prompt: Sequence[int], steps: int) -> None:
        """Refuse a prompt that is empty, has an id outside the vocabulary, or does not leave
        room in the context for `steps` more tokens, before anything runs."""
        if not prompt:
            raise TokenError("the prompt is empty; pass at least one token id.")
        check_tokens(prompt, self.config.vocab)
        if len(prompt) + steps > self.context:
            raise TokenError(f"a prompt of {len(prompt)} tokens and {steps} more to generate need "
                             f"{len(prompt) + steps} positions; the context holds {self.context}. Shorten "
                             f"the prompt, generate fewer tokens, or build SmolLM2Graph(model, context=...) larger.")


def feed(step, prompt: Sequence[int]):
    """Run every prompt token through `step` (a graph's reference or a compiled graph) at its
    position, the host giving each; the Carry after the last one (its `tok` is the first
    generated token). `end=0`: no prompt is loaded in `tokens`, each step records its argmax."""
    nxt = None
    for pos, token in enumerate(prompt):
        nxt = step(pos=pos, tok=token, end=0)
    return nxt


def first_version(graph: SmolLM2Graph, step, prompt: Sequence[int]):
    """The version of `step` that loads `prompt`: reference() itself (the tensor picks the
    branch), or for a compiled body the graph compiled with the prompt's shape and feeds=body."""
    if not isinstance(step, CompiledGraph):
        return step
    return graph.compile(prompt=((len(prompt),), np.int32), device=step.device, feeds=step)


def load_and_feed(graph: SmolLM2Graph, step, prompt: Sequence[int]):
    """One call of the first version writes the prompt into `tokens`, then `step` feeds it to
    itself, the host only passing each Carry back; the Carry after the last prompt token."""
    nxt = first_version(graph, step, prompt)(np.asarray(prompt, np.int32), pos=0, tok=0, end=0)
    for _ in prompt:
        nxt = step(**nxt)
    return nxt


def generate(graph: SmolLM2Graph, step, prompt: Sequence[int], steps: int, eos: int | None = None,
             loaded: bool = False) -> list[int]:
    """`steps` greedy tokens after `prompt`, every call host-driven through `step`, stopping after
    an `eos` token; the prompt given one token per call by the host, or (`loaded`) written into
    `tokens` by the first version and read back by the body."""
    graph.check_prompt(prompt, steps)
    nxt = load_and_feed(graph, step, prompt) if loaded else feed(step, prompt)
    out = [int(nxt["tok"])][:steps]   # the prompt is fed (as the loop does) also for steps=0
    while 0 < len(out) < steps and out[-1] != eos:
        nxt = step(**nxt)
        out.append(int(nxt["tok"]))
    return out


def generate_in_loop(graph: SmolLM2Graph, body, prompt: Sequence[int], steps: int, depth: int = 2,
                     eos: int | None = None) -> list[int]:
    """`steps` greedy tokens after `prompt` as one CarriedLoop: the first version loads the prompt
    into `tokens`, then body runs at every position, the prompt's and the generated ones, `depth`
    runs in flight. With `eos`, the host reads `tokens` after each generated token and leaves the
    loop after an `eos` (the runs already in flight complete: their tokens and cache rows stay)."""
    graph.check_prompt(prompt, steps)
    n = len(prompt)
    loop = iron.CarriedLoop(first_version(graph, body, prompt), body, depth=depth)
    for at in loop.run(n + steps - 1, np.asarray(prompt, np.int32), pos=0, tok=0, end=0):
        if eos is not None and at >= n - 1 and body.read(graph.tokens)[at + 1] == eos:
            break
    out = body.read(graph.tokens)[n:n + steps].tolist()
    return out[:out.index(eos) + 1] if eos in out else out
