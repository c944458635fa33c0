"""SmolLM2 as an iron.Graph (iron.smollm2_graph) on the real weights: reference() generates the
numpy forward's tokens, and the compiled graph on the emulator generates reference()'s,
host-driven and as a device loop at depth 1 and 2. CI runs the first 2 layers and a few tokens;
the full 30 layers and 32 tokens on three prompts are marked `full_model` (make test-full)."""
import numpy as np
import pytest

import aie_utils
from iron.compiler.describe import ddr_traffic
from iron.errors import ArgumentError, TokenError
from iron.models import numpy_forward as nf
from iron.smollm2_graph import SmolLM2Graph, generate, generate_in_loop

PROMPTS = ("Once upon a time,", "def fibonacci(n):", "Photosynthesis is the process")


@pytest.fixture(scope="module")
def graph(two_layers):
    return SmolLM2Graph(two_layers)


@pytest.fixture(scope="module")
def compiled(graph):
    with aie_utils.using_device(aie_utils.from_name("npu2")):
        return graph.compile()


@pytest.mark.parametrize("prompt", PROMPTS)
def test_reference_generates_the_numpy_forwards_tokens(two_layers, graph, prompt):
    ids = two_layers.tokenizer.encode(prompt)
    assert generate(graph, graph.reference, ids, 6) == nf.generate(two_layers, ids, 6)


def test_the_compiled_graph_generates_references_tokens_host_driven_and_as_a_device_loop(
        two_layers, graph, compiled, on_emulator):
    ids = two_layers.tokenizer.encode("Hi there")
    expected = generate(graph, graph.reference, ids, 3)
    assert expected == nf.generate(two_layers, ids, 3)
    assert compiled.plan.full_elf and len(compiled.plan.configurations) > 1   # segmented
    assert generate(graph, compiled, ids, 3) == expected
    for depth in (1, 2):
        assert generate_in_loop(graph, compiled, ids, 3, depth=depth) == expected
    assert compiled.read(graph.tokens)[len(ids) - 1:len(ids) + 2].tolist() == expected


def test_the_kv_cache_holds_the_keys_of_the_positions_fed(two_layers, graph):
    """Stopped at an end-of-text token, generation leaves the cache rows of the tokens fed and
    nothing after them: each row the numpy forward's key at that position."""
    fresh = SmolLM2Graph(two_layers, context=16)
    ids = two_layers.tokenizer.encode("Hi there")
    first = nf.generate(two_layers, ids, 1)[0]
    assert generate(fresh, fresh.reference, ids, 5, eos=first) == [first]
    cache = nf.KVCache.empty(two_layers.config, 16)
    for pos, token in enumerate(ids):
        nf.step(two_layers.weights, two_layers.config, cache, token, pos)
    for j, keys in enumerate(fresh.layers[1].keys):
        stored = fresh.read(keys)
        np.testing.assert_allclose(stored[:len(ids)], cache.keys[1, j, :len(ids)], rtol=1e-4, atol=1e-4)
        assert not stored[len(ids):].any()


def test_weights_as_they_ship_compile_stream_as_blocks_and_generate_references_tokens(
        two_layers, graph, compiled, on_emulator):
    """Compiled, the quantized graph moves each matrix's blocks as the file ships them, expands
    them on the tiles (`dequant_before_matvec`), and generates reference()'s tokens, which are
    the float32 graph's, host-driven and as a device loop at depth 1 and 2. The matrices are Q4_1
    blocks and the embedding Q8_0, about 6x fewer bytes over all 30 layers."""
    quantized = SmolLM2Graph(two_layers, quantized=True)
    assert layer_bytes(graph) / layer_bytes(quantized) == 128 / 20   # 32 float32s vs a 20-byte Q4_1 block
    assert graph.lm_head.param.array.nbytes / quantized.lm_head.param.array.nbytes == 128 / 34   # Q8_0
    with aie_utils.using_device(aie_utils.from_name("npu2")):
        body = quantized.compile()
    expanded = [what for rule, what in body.plan.rules if rule == "dequant_before_matvec" and "expanded" in what]
    assert len(expanded) == 2 * 4 + 1   # every block's four matrices and the LM head
    assert expanded[-1].startswith("g89: lm_head.param moves as stored, 30081024 bytes; each block of ")
    f32, q = ddr_traffic(compiled.plan), ddr_traffic(body.plan)
    # weight bytes a token reads: between the LM head's ratio (Q8_0: 128 / 34) and the blocks' (Q4_1: 128 / 20)
    assert 128 / 34 < f32.consts / q.consts < 128 / 20
    ids = two_layers.tokenizer.encode("Hi there")
    expected = generate(graph, graph.reference, ids, 3)
    assert generate(quantized, quantized.reference, ids, 3) == expected
    assert generate(quantized, body, ids, 3) == expected
    for depth in (1, 2):
        assert generate_in_loop(quantized, body, ids, 3, depth=depth) == expected


def layer_bytes(graph):
    """The bytes of every block's matrices."""
    return sum(m.param.array.nbytes for layer in graph.layers for m in (layer.wqkv, layer.wo, layer.gate_up, layer.down))


def test_bad_prompts_are_refused_before_anything_runs(two_layers, graph):
    with pytest.raises(TokenError) as e:
        generate(graph, graph.reference, [504] * 250, 10)
    assert str(e.value) == ("a prompt of 250 tokens and 10 more to generate need 260 positions; the context "
                            "holds 256. Shorten the prompt, generate fewer tokens, or build "
                            "SmolLM2Graph(model, context=...) larger.")
    with pytest.raises(TokenError) as e:
        generate(graph, graph.reference, [504, 60000], 1)
    assert str(e.value).startswith("token id 60000 (at index 1) is outside the vocabulary: ids must be in 0..49151.")
    with pytest.raises(TokenError) as e:
        generate(graph, graph.reference, [], 1)
    assert str(e.value) == "the prompt is empty; pass at least one token id."
    with pytest.raises(ArgumentError) as e:
        SmolLM2Graph(two_layers, context=10000)
    assert str(e.value) == ("context=10000: the model was trained for contexts up to 8192 tokens; "
                            "pass a context in 1..8192.")


@pytest.mark.full_model
@pytest.mark.parametrize("prompt", PROMPTS)
def test_all_30_layers_generate_the_numpy_forwards_32_tokens(model, prompt):
    graph = SmolLM2Graph(model)
    ids = model.tokenizer.encode(prompt)
    assert generate(graph, graph.reference, ids, 32) == nf.generate(model, ids, 32)
