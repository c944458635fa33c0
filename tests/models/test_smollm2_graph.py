"""SmolLM2 as an iron.Graph (iron.models.smollm2_graph) on the real weights: reference() generates the
numpy forward's tokens, and the compiled graph on the emulator generates reference()'s,
host-driven and as a device loop at depth 1 and 2, with float32 weights and with the weights as
the file ships them. CI runs the first 2 layers and a few tokens; the full 30 layers (32 tokens
on three prompts; 8 tokens compiled with the shipped weights) are marked `full_model` (make
test-full)."""
import numpy as np
import pytest

import aie_utils
import iron
from iron.errors import ArgumentError, LoopError, TokenError
from iron.models import numpy_forward as nf
from iron.models.smollm2_graph import (
    FUSED_CONTEXT,
    SmolLM2Graph,
    feed,
    first_version,
    generate,
    generate_in_loop,
)
from iron.plan.describe import ddr_traffic
from iron.plan.fifos import Stem
from iron.plan.plan import FifoRole, TileKind
from iron.plan.rules import Rule
from tests.quotes import quoted

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
    ids = two_layers.tokenizer.encode("Photosynthesis is the process")
    expected = generate(graph, graph.reference, ids, 3)
    assert expected == nf.generate(two_layers, ids, 3) == [28, 216, 216]
    assert compiled.plan.full_elf and len(compiled.plan.configurations) > 1   # segmented
    assert generate(graph, compiled, ids, 3) == expected
    for depth in (1, 2):
        assert generate_in_loop(graph, compiled, ids, 3, depth=depth) == expected
    assert compiled.read(graph.tokens)[len(ids):len(ids) + 3].tolist() == expected


def test_the_prompt_loaded_by_a_first_version_generates_references_tokens(two_layers, graph, compiled, on_emulator):
    """The prompt's ids as the first version's tensor (compiled with feeds= the body): it writes
    them into `tokens`, and the body reads each next prompt token from there until `end`, then
    its argmax; so prompt and generation are one CarriedLoop, and `tokens` ends up the text."""
    ids = two_layers.tokenizer.encode("Photosynthesis is the process")
    expected = nf.generate(two_layers, ids, 4)
    assert generate(graph, graph.reference, ids, 4, loaded=True) == expected
    assert graph.read(graph.tokens)[:len(ids) + 4].tolist() == ids + expected
    first = first_version(graph, compiled, ids)
    assert first.feeds is compiled and len(first.plan.configurations) == 1   # a Copy: no layer runs
    assert [(w.name, w.kind.value) for w in first.parameters] == [
        ("pos", "carried"), ("tok", "carried"), ("end", "carried"), ("pos", "dma"), ("pos", "dma"), ("pos + 5", "next")]
    assert ("max(pos + 1, end)", "dma") in [(w.name, w.kind.value) for w in compiled.parameters]
    assert generate(graph, compiled, ids, 4, loaded=True) == expected
    for depth in (1, 2):
        compiled.write(graph.tokens, np.zeros(graph.tokens.shape, np.int32))
        assert generate_in_loop(graph, compiled, ids, 4, depth=depth) == expected
        assert compiled.read(graph.tokens)[:len(ids) + 5].tolist() == ids + expected + [0]
    # A second turn: the first version loads the last token, not yet run, and the new text at the
    # position the loop stopped at, and the body runs on from the cache it left.
    turn, at = [expected[-1], *two_layers.tokenizer.encode(" of light")], len(ids) + 3
    loop = iron.CarriedLoop(first_version(graph, compiled, turn), compiled, depth=2)
    for _ in loop.run(len(turn) + 2, np.asarray(turn, np.int32), pos=at, tok=0, end=0):
        pass
    text = compiled.read(graph.tokens)[:at + len(turn) + 3].tolist()
    assert text == ids + expected[:-1] + turn + nf.generate(two_layers, ids + expected[:-1] + turn, 3)


def test_a_loop_stopped_at_an_end_of_text_token_leaves_the_cache_of_the_tokens_it_ran(two_layers, on_emulator):
    """Stopped after `eos` (here 284, the 4th token generated), the loop's runs already in flight
    complete (at most depth - 1 after the one that made `eos`): `tokens` holds the prompt and a
    token per position run, and every layer's cache holds a row for each position run, as
    reference() fed the same tokens holds them; no row after them."""
    ids = two_layers.tokenizer.encode("Photosynthesis is the process")
    device, host = SmolLM2Graph(two_layers, context=16), SmolLM2Graph(two_layers, context=16)
    with aie_utils.using_device(aie_utils.from_name("npu2")):
        body = device.compile()
    depth = 2
    assert generate_in_loop(device, body, ids, 8, depth=depth, eos=284) == [28, 216, 216, 284]
    ran = int(body.read(device.layers[0].keys)[0].any(axis=1).sum())   # positions run: key rows written
    assert len(ids) + 3 <= ran <= len(ids) + 2 + depth
    text = body.read(device.tokens)
    assert text[:ran + 1].tolist() == ids + nf.generate(two_layers, ids, ran + 1 - len(ids))
    assert not text[ran + 1:].any()
    feed(host.reference, text[:ran].tolist())
    for mine, theirs in zip(device.layers, host.layers):
        for state, oracle in ((mine.keys, theirs.keys), (mine.values, theirs.values)):
            np.testing.assert_allclose(body.read(state), host.read(oracle), rtol=1e-5, atol=1e-5)


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
    stored = fresh.read(fresh.layers[1].keys)   # (key/value heads, context, head size)
    assert stored.shape == (3, 16, 64)
    np.testing.assert_allclose(stored[:, :len(ids)], cache.keys[1, :, :len(ids)], rtol=1e-4, atol=1e-4)
    assert not stored[:, len(ids):].any()


def test_weights_as_they_ship_compile_stream_as_blocks_and_generate_references_tokens(
        two_layers, graph, compiled, on_emulator):
    """Compiled, the quantized graph moves each matrix's blocks as the file ships them into
    QMatVec, which expands each weight as it multiplies it, and generates reference()'s tokens, which are
    the float32 graph's, host-driven and as a device loop at depth 1 and 2 on npu2, host-driven
    on npu1. The matrices are Q4_1
    blocks and the embedding Q8_0, about 6x fewer bytes over all 30 layers."""
    quantized = SmolLM2Graph(two_layers, quantized=True)
    assert layer_bytes(graph) / layer_bytes(quantized) == 128 / 20   # 32 float32s vs a 20-byte Q4_1 block
    assert graph.lm_head.param.array.nbytes / quantized.lm_head.param.array.nbytes == 128 / 34   # Q8_0
    with aie_utils.using_device(aie_utils.from_name("npu2")):
        body = quantized.compile()
    streamed = [what for rule, what in body.plan.rules if rule == Rule.STREAM_LARGE_MATRIX and " uint8 " in what]
    assert len(streamed) == 5 + 2   # the placed layer's five matrices (the layers loop over time), the LM head's two pieces
    assert [what.split(" streamed")[0] for what in streamed[-2:]] == [
        "g86: lm_head.param[:24576] (24576, 612) uint8 (15040512 bytes)",
        "g87: lm_head.param[24576:] (24576, 612) uint8 (15040512 bytes)"]
    assert Rule.DEQUANT_BEFORE_MATVEC not in {rule for rule, _ in body.plan.rules}
    f32, q = ddr_traffic(compiled.plan), ddr_traffic(body.plan)
    # weight bytes a token reads: between the LM head's ratio (Q8_0: 128 / 34) and the blocks' (Q4_1: 128 / 20)
    assert 128 / 34 < f32.consts / q.consts < 128 / 20
    ids = two_layers.tokenizer.encode("Hi there")
    expected = generate(graph, graph.reference, ids, 3)
    assert generate(quantized, quantized.reference, ids, 3) == expected
    assert generate(quantized, body, ids, 3) == expected
    for depth in (1, 2):
        assert generate_in_loop(quantized, body, ids, 3, depth=depth) == expected
    on_npu1 = quantized.compile(device=aie_utils.from_name("npu1"))   # xclbin segments, host-driven
    assert not on_npu1.plan.full_elf and generate(quantized, on_npu1, ids, 3) == expected


@pytest.mark.parametrize("quantized", [False, True])
def test_fused_attention_generates_the_numpy_forwards_tokens_host_driven_in_a_loop_and_on_npu1(
        two_layers, on_emulator, quantized):
    """fused=True: each layer's attention one Attention call per key/value head over a cache of
    rows (context FUSED_CONTEXT): a layer is 15 groups instead of 41, and the design generates
    the numpy forward's tokens host-driven and as a device loop at depth 2 on npu2, host-driven
    on npu1, float32 and as shipped."""
    graph = SmolLM2Graph(two_layers, context=FUSED_CONTEXT, quantized=quantized, fused=True)
    ids = two_layers.tokenizer.encode("Photosynthesis is the process")
    expected = nf.generate(two_layers, ids, 3)
    assert generate(graph, graph.reference, ids, 3) == expected
    with aie_utils.using_device(aie_utils.from_name("npu2")):
        body = graph.compile()
    attention = [g for g, calls in body.plan.groups if any(c.startswith("Attention#") for c in calls)]
    # one per key/value head and placed layer: the two layers loop on one layer's cores
    assert (body.plan.repeat is not None, len(attention)) == (True, 3)
    assert generate(graph, body, ids, 3) == expected
    assert generate_in_loop(graph, body, ids, 3, depth=2) == expected
    on_npu1 = graph.compile(device=aie_utils.from_name("npu1"))
    assert generate(graph, on_npu1, ids, 3) == expected


def test_all_30_fused_layers_as_shipped_loop_over_time_in_the_first_of_three_configurations(model):
    """fused=True, quantized: the embedding and one placed layer (15 groups) whose cores loop 30
    times share the first configuration; the final RMSNorm and the LM head's two pieces (each
    split over 6 tiles) the second; the argmax's streamed reductions, writing their results into
    states, and the calls reading those states back the third. The design spread in space is
    compiled only until its segments certainly take longer (the Choice's rejected side says "at
    least")."""
    graph = SmolLM2Graph(model, context=FUSED_CONTEXT, quantized=True, fused=True)
    plan = graph.compile(device=aie_utils.from_name("npu2")).plan
    assert (plan.repeat.count, plan.repeat.groups) == (30, tuple(f"g{i}" for i in range(1, 16)))
    assert [[name for name, _ in c.groups] for c in plan.configurations] == [
        [f"g{i}" for i in range(16)], ["g451", "g452", "g453"], [f"g{i}" for i in range(454, 461)]]
    groups = dict(plan.groups)   # over each piece's 6 rows of logits, each into its part of a state
    assert [groups[f"g{i}"] for i in range(454, 458)] == [("Argmax#634",), ("Max#635",), ("Argmax#636",), ("Max#637",)]
    assert [what.split(":")[0] for rule, what in plan.rules if rule == Rule.STREAM_ROW_BLOCKS] == [
        "g454", "g455", "g456", "g457"]
    # each projection of the layer split over its share of the tiles (the more work, the more;
    # gate and up, g11 and g12, alongside, sharing theirs), its residual added in the group after
    # it (`residual`), its rows read through its share of the shim channels (the larger, the more)
    splits = [what for rule, what in plan.rules if rule == Rule.SPLIT_MATRIX_OVER_TILES and "split by rows" in what]
    assert [what.split(":")[0] + what.split("over")[-1] for what in splits] == [
        "g2 4 tiles", "g9 3 tiles", "g11 4 tiles", "g12 4 tiles", "g14 6 tiles", "g452 6 tiles", "g453 6 tiles"]   # and the LM head
    lanes = [what.split(" shim")[0] for rule, what in plan.rules if rule == Rule.STREAM_OVER_SHIM_CHANNELS]
    assert lanes == [f"{g}: its rows read through {n}" for g, n in (("g11", 2), ("g12", 2), ("g14", 3), ("g452", 6), ("g453", 6))]
    # every projection is QMatVec on its blocks: the shim streams their bytes (uint8) into it and no
    # Dequant writes a weight; the one Dequant expands the token's embedding row (g0)
    calls = [c.split("#")[0] for _, group in plan.groups for c in group]
    assert (calls.count("QMatVec"), calls.count("Dequant"), calls.count("MatVec"), groups["g0"]) == (
        5 + 2, 1, 0, ("Dequant#0",))   # the placed layer's five (the layers loop over it), the LM head's two
    weights = {f.name.group: f.dtype for c in plan.configurations for f in c.fifos
               if f.producer.kind is TileKind.SHIM and f.role is FifoRole.WEIGHTS and f.name.stem is Stem.W}
    assert weights == dict.fromkeys(("g2", "g9", "g11", "g12", "g14", "g452", "g453"), np.dtype(np.uint8))
    assert Rule.DEQUANT_BEFORE_MATVEC not in {rule for rule, _ in plan.rules}
    (choice,) = [c for _, c in plan.choices if c.rule is Rule.REPEAT_OVER_TIME]
    assert choice.chosen.startswith("over time") and choice.rejected.startswith("in space: at least ")
    assert choice.chosen_ns < choice.rejected_ns


def test_fused_attention_needs_a_cache_one_tile_holds(two_layers):
    assert SmolLM2Graph(two_layers, context=FUSED_CONTEXT, fused=True).layers[0].values.shape == (3, FUSED_CONTEXT, 64)
    with pytest.raises(ArgumentError) as e:
        SmolLM2Graph(two_layers, fused=True)
    quoted(e.value, "fused=True", "context=256", "64 positions", "1..64", "fused=False")


def layer_bytes(graph):
    """The bytes of every block's matrices."""
    return sum(m.param.array.nbytes for layer in graph.layers for m in (layer.wqkv, layer.wo, layer.gate, layer.up, layer.down))


def test_bad_prompts_are_refused_before_anything_runs(two_layers, graph):
    with pytest.raises(TokenError) as e:
        generate(graph, graph.reference, [504] * 250, 10)
    quoted(e.value, "250 tokens", "10 more", "260 positions", "256", "SmolLM2Graph")
    with pytest.raises(TokenError) as e:
        generate(graph, graph.reference, [504, 60000], 1)
    quoted(e.value, "token id 60000", "index 1", "0..49151", "model.tokenizer.encode(text)")
    with pytest.raises(TokenError) as e:
        generate(graph, graph.reference, [], 1)
    assert str(e.value) == "the prompt is empty; pass at least one token id."
    with pytest.raises(ArgumentError) as e:
        SmolLM2Graph(two_layers, context=10000)
    quoted(e.value, "context=10000", "8192", "1..8192")


@pytest.mark.full_model
@pytest.mark.parametrize("prompt", PROMPTS)
def test_all_30_layers_generate_the_numpy_forwards_32_tokens(model, prompt):
    graph = SmolLM2Graph(model)
    ids = model.tokenizer.encode(prompt)
    assert generate(graph, graph.reference, ids, 32) == nf.generate(model, ids, 32)


@pytest.mark.full_model
def test_all_30_layers_as_shipped_generate_the_numpy_forwards_tokens_on_the_emulator(model, on_emulator):
    """The whole model with its weights as the file ships them, compiled for npu2, as a device
    loop: the float32 numpy forward's 8 tokens."""
    graph = SmolLM2Graph(model, quantized=True)
    ids = model.tokenizer.encode(PROMPTS[0])
    with aie_utils.using_device(aie_utils.from_name("npu2")):
        body = graph.compile()
    assert generate_in_loop(graph, body, ids, 8) == nf.generate(model, ids, 8)


def test_on_npu1_each_segment_is_an_xclbin_and_generation_is_host_driven(two_layers, graph, xrt_npu1):
    """npu1 has no full ELF: the body compiles into segments, each built as its own xclbin and
    instruction stream, which the host runs in order within each call (here through XRT on the
    pyxrt stand-in, each segment on its own emulator); it generates reference()'s tokens
    host-driven, with the prompt fed by the host or loaded by the first version (an xclbin of its
    own); a device loop is refused, saying why."""
    ids = two_layers.tokenizer.encode("Photosynthesis is the process")
    fresh = SmolLM2Graph(two_layers)   # its own compiled versions, so they run through XRT
    with aie_utils.using_device(aie_utils.from_name("npu1")):
        body = fresh.compile()
    segments = len(body.plan.segments)
    assert (body.plan.full_elf, body.plan.image) == (False, "xclbin") and segments > 1
    assert {segment.image for segment in body.plan.segments} == {"xclbin"}
    expected = generate(graph, graph.reference, ids, 2)
    assert generate(fresh, body, ids, 2) == expected
    calls = len(ids) + 1
    assert xrt_npu1.ran == list(range(segments)) * calls
    assert generate(fresh, body, ids, 2, loaded=True) == expected
    assert xrt_npu1.ran[segments * calls:] == [segments] + list(range(segments)) * calls   # first, then body
    with pytest.raises(LoopError) as e:
        generate_in_loop(fresh, body, ids, 2)
    quoted(e.value, "SmolLM2Graph", "npu1", "no full ELF")
