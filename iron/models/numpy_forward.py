"""SmolLM2 as a plain float32 numpy forward with a KV cache: the oracle iron's designs of the
model are checked against, and the baseline bench/model.py times them by.

Written from the model's definition alone, one token per step: the token's embedding row, then
per block x += Wo attention(RoPE(Wq h), RoPE(Wk h), Wv h) with h = RMSNorm(x), and
x += down(silu(gate h) * up h) with h = RMSNorm(x); then RMSNorm and the tied LM head (the
embedding table). RoPE rotates adjacent pairs (x[2i], x[2i+1]) by pos * base^(-2i/head_dim) (the
GGUF layout of the Q and K rows); each key/value head serves heads / kv_heads query heads.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from threadpoolctl import threadpool_limits

from iron.errors import ArgumentError, TokenError
from iron.models.smollm2 import Config, SmolLM2, Weights
from iron.models.tokenizer import check_tokens


@dataclass(frozen=True)
class KVCache:
    """Keys and values of every position so far: (layers, kv_heads, context, head_dim) each."""

    keys: np.ndarray
    values: np.ndarray

    @classmethod
    def empty(cls, config: Config, context: int) -> KVCache:
        shape = (config.layers, config.kv_heads, context, config.head_dim)
        return cls(np.zeros(shape, np.float32), np.zeros(shape, np.float32))

    @property
    def context(self) -> int:
        return self.keys.shape[2]


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x) + np.float32(eps)) * weight


def rope(x: np.ndarray, pos: int, base: float) -> np.ndarray:
    """(heads, head_dim) rotated at `pos`, pair i = (x[2i], x[2i+1])."""
    half = x.shape[1] // 2
    angle = pos * base ** (-np.arange(half) / half)
    cos, sin = np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)
    even, odd = x[:, 0::2], x[:, 1::2]
    out = np.empty_like(x)
    out[:, 0::2] = even * cos - odd * sin
    out[:, 1::2] = even * sin + odd * cos
    return out


def attention(q: np.ndarray, keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """q (heads, d) over keys/values (kv_heads, n, d); query head h reads kv head
    h // (heads / kv_heads). Returns (heads * d,)."""
    kv_heads, _, d = keys.shape
    q = q.reshape(kv_heads, -1, d)
    scores = q @ keys.transpose(0, 2, 1) / np.float32(np.sqrt(d))
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return (p @ values).reshape(-1)


def silu(x: np.ndarray) -> np.ndarray:
    return x / (np.float32(1) + np.exp(-x))


def step(weights: Weights, config: Config, cache: KVCache, token: int, pos: int) -> np.ndarray:
    """Feed `token` at position `pos` (its K and V enter the cache there); the next token's
    logits, (vocab,) float32."""
    check_tokens([token], config.vocab)
    if not 0 <= pos < cache.context:
        raise TokenError(f"position {pos} is outside the context of {cache.context} tokens. "
                         f"Make the KV cache larger (KVCache.empty(config, context)).")
    heads, kv_heads, d, eps = config.heads, config.kv_heads, config.head_dim, config.rms_eps
    x = weights.token_embd[token]
    for i, b in enumerate(weights.blocks):
        h = rms_norm(x, b.attn_norm, eps)
        cache.keys[i, :, pos] = rope((b.attn_k @ h).reshape(kv_heads, d), pos, config.rope_base)
        cache.values[i, :, pos] = (b.attn_v @ h).reshape(kv_heads, d)
        q = rope((b.attn_q @ h).reshape(heads, d), pos, config.rope_base)
        x = x + b.attn_output @ attention(q, cache.keys[i, :, :pos + 1], cache.values[i, :, :pos + 1])
        h = rms_norm(x, b.ffn_norm, eps)
        x = x + b.ffn_down @ (silu(b.ffn_gate @ h) * (b.ffn_up @ h))
    return weights.token_embd @ rms_norm(x, weights.output_norm, eps)


# One token's products are matrix-vector products, bound by memory: a second BLAS thread adds
# little, and on cores shared with other work it spins (8x the CPU time per token, measured).
@threadpool_limits.wrap(limits=1, user_api="blas")
def generate(model: SmolLM2, prompt: Sequence[int], steps: int, context: int = 256) -> list[int]:
    """The `steps` greedy tokens after `prompt` (token ids), fed one token per step."""
    config = model.config
    if not 1 <= context <= config.context:
        raise ArgumentError(f"context={context}: the model was trained for contexts up to "
                            f"{config.context} tokens; pass a context in 1..{config.context}.")
    if not prompt:
        raise TokenError("the prompt is empty; pass at least one token id.")
    check_tokens(prompt, config.vocab)
    if len(prompt) + steps > context:
        raise TokenError(f"a prompt of {len(prompt)} tokens and {steps} more to generate need "
                         f"{len(prompt) + steps} positions; the context holds {context}. Shorten "
                         f"the prompt, generate fewer tokens, or pass a larger context.")
    cache = KVCache.empty(config, context)
    for pos, token in enumerate(prompt):
        logits = step(model.weights, config, cache, token, pos)
    out = []
    for pos in range(len(prompt), len(prompt) + steps):
        out.append(int(np.argmax(logits)))
        if len(out) < steps:
            logits = step(model.weights, config, cache, out[-1], pos)
    return out
