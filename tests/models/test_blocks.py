"""The Q4_1 and Q8_0 block expanders are bit-exact with gguf.quants.dequantize: on the model's
own tensors, and on random blocks whose float16 scales take every kind of value (normal,
subnormal, zero, infinite, NaN)."""
import numpy as np
import pytest
from gguf import GGMLQuantizationType as GGML
from gguf.quants import dequantize

from iron.models.blocks import Q4_1, Q8_0

FORMATS = {"Q4_1": (Q4_1, GGML.Q4_1), "Q8_0": (Q8_0, GGML.Q8_0)}


def same_bits(a, b):
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("name", FORMATS)
def test_random_blocks_match_gguf(name):
    fmt, ggml = FORMATS[name]
    rows = np.random.default_rng(14).integers(0, 256, (64, 8 * fmt.nbytes), dtype=np.uint8)
    blocks = rows.reshape(-1, fmt.nbytes)
    special = np.array([0.0, -0.0, 6e-8, -65504, np.inf, -np.inf, np.nan], np.float16)
    blocks[:7, 0:2] = special.view(np.uint8).reshape(7, 2)  # the scale
    if fmt is Q4_1:
        blocks[7:14, 2:4] = special.view(np.uint8).reshape(7, 2)  # the minimum
    with np.errstate(invalid="ignore", over="ignore"):
        ours, theirs = fmt.dequantize(rows), dequantize(rows, ggml)
    assert ours.shape == (64, 8 * 32)
    assert np.isnan(ours).any() and np.isinf(ours).any()
    assert same_bits(ours, theirs)


@pytest.mark.parametrize("tensor", ["token_embd.weight", "blk.0.attn_q.weight",
                                    "blk.29.ffn_down.weight"])
def test_model_tensors_match_gguf(model, tensor):
    t = model.tensors[tensor]
    ours = t.format.dequantize(t.data)
    assert same_bits(ours, dequantize(t.data, GGML[t.kind]))
    assert ours.shape == t.shape


def test_one_block_by_hand():
    """Q4_1: weight = scale * code + minimum, codes 0..15 low nibbles then high nibbles."""
    scale, minimum = np.float16(0.5), np.float16(-2.0)
    codes = np.arange(32) % 16
    packed = (codes[:16] | (codes[16:] << 4)).astype(np.uint8)
    block = np.concatenate([np.array([scale, minimum]).view(np.uint8), packed])[None]
    assert block.shape == (1, Q4_1.nbytes)
    np.testing.assert_array_equal(Q4_1.expand(block)[0], 0.5 * codes - 2.0)
    q8 = np.concatenate([np.array([scale]).view(np.uint8), np.arange(-16, 16, dtype=np.int8).view(np.uint8)])[None]
    np.testing.assert_array_equal(Q8_0.expand(q8)[0], 0.5 * np.arange(-16, 16))
