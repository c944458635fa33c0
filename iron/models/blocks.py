"""Quantized weight blocks as GGUF ships them, expanded to float32 by plain numpy.

A matrix row is stored as blocks of 32 weights. Q8_0: a float16 scale then 32 int8 codes
(34 bytes), weight = scale * code. Q4_1: a float16 scale, a float16 minimum, then 16 bytes of
4-bit codes, the low nibbles holding weights 0..15 and the high nibbles 16..31 (20 bytes),
weight = scale * code + minimum. Each format's `expand` takes an (n, bytes) uint8 array of blocks
to (n, 32) float32 with the same float32 operations, in the same order, as
`gguf.quants.dequantize`, so its result is bit-exact; a device Dequant kernel is checked against
`expand`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

WEIGHTS_PER_BLOCK = 32


def _float16s(blocks: np.ndarray, at: int) -> np.ndarray:
    """The float16 at byte `at` of each block, as an (n, 1) float32 column."""
    return blocks[:, at:at + 2].view(np.float16).astype(np.float32)


def expand_q8_0(blocks: np.ndarray) -> np.ndarray:
    """(n, 34) uint8 Q8_0 blocks -> (n, 32) float32 weights: code * scale."""
    codes = blocks[:, 2:].view(np.int8).astype(np.float32)
    return codes * _float16s(blocks, 0)


def expand_q4_1(blocks: np.ndarray) -> np.ndarray:
    """(n, 20) uint8 Q4_1 blocks -> (n, 32) float32 weights: scale * code + minimum."""
    packed = blocks[:, 4:]
    codes = np.concatenate([packed & np.uint8(0x0F), packed >> np.uint8(4)], axis=1)
    return _float16s(blocks, 0) * codes.astype(np.float32) + _float16s(blocks, 2)


@dataclass(frozen=True)
class BlockFormat:
    """One GGUF block format: its name, its block's size in bytes and its expander."""

    name: str
    nbytes: int
    expand: Callable[[np.ndarray], np.ndarray]

    def dequantize(self, rows: np.ndarray) -> np.ndarray:
        """(rows, row bytes) uint8, as GGUF stores a matrix -> (rows, columns) float32."""
        blocks = np.ascontiguousarray(rows).reshape(-1, self.nbytes)
        return self.expand(blocks).reshape(rows.shape[0], -1)


Q8_0 = BlockFormat("Q8_0", 34, expand_q8_0)
Q4_1 = BlockFormat("Q4_1", 20, expand_q4_1)
FORMATS = {f.name: f for f in (Q8_0, Q4_1)}
