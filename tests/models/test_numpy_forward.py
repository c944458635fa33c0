"""The numpy forward of SmolLM2 (the oracle of iron's designs of the model): its greedy text on
the real weights, pinned token for token, and its parts checked against their definitions."""
import numpy as np
import pytest

from iron.errors import ArgumentError, TokenError
from iron.models import numpy_forward as nf
from tests.quotes import quoted

# Greedy continuations of the full 30-layer model (float32; the smallest top-1/top-2 logit
# margin over these 32 steps is 0.05 or more, far above float32 rounding).
PINNED = {
    "Once upon a time,": (
        [260, 2240, 282, 23324, 27108, 436, 253, 15114, 39228, 28, 351, 25854, 41658, 284, 14055,
         9018, 30, 1249, 347, 260, 929, 3514, 411, 28, 260, 2240, 2585, 288, 5946, 624, 2798, 9615],
        " the city of Nova Haven was a thriving metropolis, with towering skyscrapers and bustling "
        "streets. But as the years went by, the city began to lose its original essence"),
    "def fibonacci(n):": (
        [472, 585, 304, 1758, 216, 32, 42, 448, 1003, 216, 33, 472, 1003, 304, 1672, 3987, 46477,
         24, 94, 731, 216, 33, 25, 198, 198, 19, 4246, 260, 1517, 198, 3272, 24],
        "\n    if n == 0:\n        return 1\n    return n * fibonacci(n - 1)\n\n# Test the function"
        "\nprint("),
    "Photosynthesis is the process": (
        [282, 16774, 582, 2775, 618, 624, 1038, 1439, 28, 527, 314, 1895, 327, 1029, 30, 669, 980,
         314, 597, 1343, 347, 10746, 23570, 30, 198, 198, 23645, 755, 23570, 314, 253, 11333],
        " of converting one thing into its own energy, which is essential for life. This process "
        "is also known as cellular respiration.\n\nCellular respiration is a metabolic"),
}


@pytest.mark.parametrize("prompt", PINNED)
def test_greedy_text_is_pinned(model, prompt):
    ids, text = PINNED[prompt]
    out = nf.generate(model, model.tokenizer.encode(prompt), 32)
    assert out == ids
    assert model.tokenizer.decode(out) == text


def test_capital_of_france(model):
    out = nf.generate(model, model.tokenizer.encode("The capital of France is"), 2)
    assert model.tokenizer.decode(out) == " Paris."


def test_rope_rotates_adjacent_pairs():
    x = np.zeros((1, 64), np.float32)
    x[0, 0], x[0, 2] = 1.0, 1.0  # the first two pairs' even element
    out = nf.rope(x, 3, 100000.0)
    np.testing.assert_allclose(out[0, :4], [np.cos(3), np.sin(3), np.cos(3 * 100000 ** (-1 / 32)),
                                            np.sin(3 * 100000 ** (-1 / 32))], rtol=1e-6)
    assert not out[0, 4:].any()
    np.testing.assert_array_equal(nf.rope(x, 0, 100000.0), x)


def test_rope_scores_depend_on_distance_only():
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal((2, 1, 64)).astype(np.float32)
    near = nf.rope(q, 7, 1e5)[0] @ nf.rope(k, 2, 1e5)[0]
    far = nf.rope(q, 107, 1e5)[0] @ nf.rope(k, 102, 1e5)[0]
    np.testing.assert_allclose(near, far, rtol=1e-4)


def test_grouped_query_attention_by_head():
    """Query head h reads key/value head h // 3; softmax(q.k / 8) weights the values."""
    rng = np.random.default_rng(2)
    q = rng.standard_normal((9, 64)).astype(np.float32)
    keys, values = rng.standard_normal((2, 3, 5, 64)).astype(np.float32)
    out = nf.attention(q, keys, values).reshape(9, 64)
    for h in range(9):
        s = keys[h // 3] @ q[h] / 8.0
        p = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
        np.testing.assert_allclose(out[h], p @ values[h // 3], rtol=1e-5, atol=1e-6)


def test_cache_is_causal(two_layers):
    """Two prompts that share a prefix fill the same cache rows for it and leave later rows
    zero; what comes after cannot change what came before."""
    config = two_layers.config

    def fed(tokens):
        cache = nf.KVCache.empty(config, 8)
        logits = [nf.step(two_layers.weights, config, cache, t, pos) for pos, t in enumerate(tokens)]
        return cache, logits

    (a, la), (b, lb) = fed([504, 3575, 282]), fed([504, 3575, 4649])
    assert a.keys.shape == (2, 3, 8, 64)
    np.testing.assert_array_equal(a.keys[:, :, :2], b.keys[:, :, :2])
    np.testing.assert_array_equal(a.values[:, :, :2], b.values[:, :, :2])
    np.testing.assert_array_equal(la[1], lb[1])
    assert not np.array_equal(a.keys[:, :, 2], b.keys[:, :, 2])
    assert not a.keys[:, :, 3:].any() and not a.values[:, :, 3:].any()


def test_prompt_longer_than_context(two_layers):
    with pytest.raises(TokenError) as e:
        nf.generate(two_layers, [504] * 250, 10)
    quoted(e.value, "250 tokens", "10 more", "260 positions", "256")


def test_context_beyond_the_models(two_layers):
    with pytest.raises(ArgumentError) as e:
        nf.generate(two_layers, [504], 1, context=10000)
    quoted(e.value, "context=10000", "8192", "1..8192")


def test_bad_prompts(two_layers):
    with pytest.raises(TokenError) as e:
        nf.generate(two_layers, [504, 60000], 1)
    quoted(e.value, "token id 60000", "index 1", "0..49151")
    with pytest.raises(TokenError) as e:
        nf.generate(two_layers, [], 1)
    assert str(e.value) == "the prompt is empty; pass at least one token id."


def test_step_outside_the_cache(two_layers):
    cache = nf.KVCache.empty(two_layers.config, 4)
    with pytest.raises(TokenError) as e:
        nf.step(two_layers.weights, two_layers.config, cache, 504, 4)
    quoted(e.value, "position 4", "context of 4", "KVCache.empty(config, context)")
    assert not cache.keys.any()
