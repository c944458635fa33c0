"""The repeated-block designs of iron.models.designs (issue 26's targets) at a reduced size:
reference() against each design's hand-written numpy (bfloat16 attention within a stated
tolerance of float64, the integer designs exactly), and the design compiled for npu2 and npu1
and run on the emulator against reference(). bench/designs.py compiles them at full size."""
import numpy as np
import pytest

from iron.errors import ArgumentError
from iron.models.designs import (
    BF16,
    Bottleneck,
    EdgeFilter,
    GroupedQueryAttention,
    numpy_attention,
    numpy_bottleneck,
    numpy_edges,
    with_halo,
)
from iron.plan.rules import Rule

pytestmark = pytest.mark.usefixtures("on_emulator")


@pytest.fixture(params=["npu2", "npu1"])
def device(request):
    return request.param


def attention_inputs(graph, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(dtype) for shape, dtype in graph.specs().values()]


def test_grouped_query_attention_is_each_heads_softmax_of_its_kv_heads_scores(device):
    graph = GroupedQueryAttention(heads=4, kv_heads=2, positions=64, head_dim=16)
    inputs = attention_inputs(graph)
    want = graph.reference(*inputs)
    assert len(want) == 4 and all(o.shape == (64, 16) and o.dtype == BF16 for o in want)
    for got, exact in zip(want, numpy_attention(graph, *inputs)):
        np.testing.assert_allclose(got.astype(np.float64), exact, rtol=2e-2, atol=2e-2)   # bfloat16: 8 bits
    compiled = graph.compile(**graph.specs(), device=device)
    for got, expected in zip(compiled(*inputs), want):
        np.testing.assert_allclose(got.astype(np.float32), expected.astype(np.float32), rtol=1e-2, atol=1e-2)


def test_query_heads_of_one_group_read_the_same_kv_head():
    graph = GroupedQueryAttention(heads=4, kv_heads=2, positions=16, head_dim=8)
    q, keys, values = attention_inputs(graph, seed=1)
    q[1] = q[0]   # heads 0 and 1 share key/value head 0; head 2 reads head 1
    q[2] = q[0]
    out = graph.reference(q, keys, values)
    np.testing.assert_array_equal(out[0], out[1])
    assert not np.array_equal(out[0], out[2])


def test_the_bottleneck_block_in_row_blocks_equals_the_whole_image_formula(device):
    graph = Bottleneck(side=8, channels=32, mid=16, rows=2, parts=2)
    picture = np.random.default_rng(2).integers(0, 256, (8, 8, 32), dtype=np.uint8)
    pixels = with_halo(picture).reshape(-1, 32)
    want = numpy_bottleneck(graph, picture.reshape(-1, 32))
    assert 0 < (want == 0).sum() and 0 < (want == 255).sum() and ((want > 0) & (want < 255)).mean() > 0.9
    np.testing.assert_array_equal(graph.reference(pixels), want)
    compiled = graph.compile(pixels=pixels, device=device)
    np.testing.assert_array_equal(compiled(pixels), want)


@pytest.mark.parametrize("rows", [2, 4])
def test_the_edge_filter_in_row_blocks_equals_the_whole_image_filter(device, rows):
    graph = EdgeFilter(height=16, width=24, rows=rows)
    picture = np.random.default_rng(3).integers(0, 256, (16, 24, 1), dtype=np.uint8)
    picture[4:12, 6:18] = 40   # a dark rectangle: its border is an edge on block boundaries too
    want = numpy_edges(graph, picture)
    assert 0.2 < (want == 255).mean() < 0.8
    image = with_halo(picture)
    assert image.shape == (18, 24, 1) and not image[0].any() and not image[-1].any()
    graph.reference(image)
    np.testing.assert_array_equal(graph.read(graph.edges), want)
    compiled = graph.compile(image=image, device=device)
    compiled(image)
    np.testing.assert_array_equal(compiled.read(graph.edges), want)


def test_attention_whose_scores_outgrow_a_tile_loops_its_heads_in_at_most_two_configurations(device):
    """The full-size structure (bench/designs.py) over 256 positions, head 128: q[h] (64 KiB) and
    the scores (128 KiB) are larger than a tile, so every value between the head's grids and
    streams passes through a DDR buffer of the compiler's (`through_between_groups`), each grid
    and stream leaves whole columns for the groups after it (`columns_for_later_groups`) and the
    heads loop over one placed iteration (`repeat_over_time`), cut in two configurations each
    looping over every head (loop fission; on npu2 four heads, which without the sequence's waits
    between iterations would run a shim out of buffer descriptors mid-step and hang): every head
    equals reference()."""
    heads = {"npu2": 4, "npu1": 2}[device]
    graph = GroupedQueryAttention(heads=heads, kv_heads=heads // 2, positions=256, head_dim=128)
    inputs = attention_inputs(graph)
    compiled = graph.compile(**graph.specs(), device=device)
    for got, expected in zip(compiled(*inputs), graph.reference(*inputs)):
        np.testing.assert_allclose(got.astype(np.float32), expected.astype(np.float32), rtol=1e-2, atol=1e-2)
    plan = compiled.plan
    assert (len(plan.configurations), plan.repeat.count, len(plan.repeat.groups)) == ({"npu2": 1, "npu1": 2}[device],
                                                                                     heads, 7)
    # on npu2 grids and streams on at most 2 rows of cores fit one configuration, estimated faster than the two
    # configurations every row takes, each loaded every call (plan_ns); on npu1 no fewer rows fit one
    assert [t for r, t in plan.rules if r is Rule.FEWER_ROWS_FOR_ONE_CONFIGURATION] == {
        "npu2": ["grids and streams on at most 2 rows of cores: 1 configuration"], "npu1": []}[device]
    passed = [text.split(" ")[0] for rule, text in plan.rules if rule is Rule.THROUGH_BETWEEN_GROUPS]
    first = 4 * heads   # the Copies copy_view_for_grid inserts come after the traced calls
    assert passed[:6] == [f"Copy#{first}", f"Copy#{first + 1}", "MatMul#0", "Scale#1", "Softmax#2", f"Copy#{first + 2}"]
    looping = {c.group: c.program[0].count for p in plan.configurations for c in p.cores
               if c.group in plan.repeat.groups}
    assert looping == dict.fromkeys(plan.repeat.groups, heads)


def test_the_bottleneck_at_the_full_structure_streams_its_tail_as_one_group(device):
    """The full-size structure at 16 x 16 pixels: the 1x1 convolutions' products (72 and 256 KiB)
    pass through DDR buffers of the compiler's, the 3x3 convolution loops over its 16 blocks, the
    tail (Requantize, the two Casts, the skip Add, Requantize) is one streamed group (the skip
    add's other operand joins the stream: `stream_takes_unrelated`), and the whole block runs in
    one configuration: equal to numpy exactly."""
    graph = Bottleneck(side=16, channels=256, mid=64, rows=2, parts=2)
    picture = np.random.default_rng(2).integers(0, 256, (16, 16, 256), dtype=np.uint8)
    pixels = with_halo(picture).reshape(-1, 256)
    compiled = graph.compile(pixels=pixels, device=device)
    np.testing.assert_array_equal(compiled(pixels), numpy_bottleneck(graph, picture.reshape(-1, 256)))
    plan = compiled.plan
    assert plan.groups[-1][1] == ("Requantize#35", "Cast#36", "Cast#37", "Add#38", "Requantize#39")
    assert (plan.repeat.count, [t.split(" ")[0] for r, t in plan.rules if r is Rule.THROUGH_BETWEEN_GROUPS]) == \
        (16, ["MatMul#0", "MatMul#34"])
    # on every row of cores the block takes 2 configurations on npu2 and 4 on npu1; grids and streams on
    # fewer rows leave tiles and channels to the rest: one configuration (fewer_rows_for_one_configuration)
    rows = {"npu2": 2, "npu1": 1}[device]
    assert len(plan.configurations) == 1
    assert [t for r, t in plan.rules if r is Rule.FEWER_ROWS_FOR_ONE_CONFIGURATION] == [
        f"grids and streams on at most {rows} row{'s' * (rows > 1)} of cores: 1 configuration"]


@pytest.mark.parametrize("make, text", [
    (lambda: EdgeFilter(height=10, rows=4), "rows=4 does not divide height=10 into alike blocks; pass a divisor of 10."),
    (lambda: Bottleneck(side=8, rows=3), "rows=3 does not divide side=8 into alike blocks; pass a divisor of 8."),
    (lambda: Bottleneck(mid=64, parts=3), "mid=64 channels do not split into parts=3 alike parts; pass a divisor of 64."),
])
def test_blocks_that_would_not_be_alike_are_refused_naming_the_sizes(make, text):
    with pytest.raises(ArgumentError) as refused:
        make()
    assert str(refused.value) == text
