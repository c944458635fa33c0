"""`route` (iron/compiler/route.py): every FIFO's ends as a Route (name, role, group, producer,
consumers, shared memory) in Plan order, before any object is packed; the host tensors one
group forwards to later readers (`forward_shared_input`); the FIFOs of a split group, of a grid
(`tile_matmul_over_array`) and of a stream (`stream_elementwise`); and `choose_relays` refusing
a core no carrier can bring within its input channels (PlacementError naming the group, its tile
and its FIFOs)."""
from collections import Counter

import numpy as np
import pytest

from aie_utils import from_name
from iron.compiler.route import HOST, CoreInputs, choose_relays, forwarded_to
from iron.errors import PlacementError
from iron.plan.fifos import EMIT, FifoId, Stem
from iron.plan.plan import FifoRole, Tile, TileKind
from iron.plan.rules import Rule
from tests.compiler import designs
from tests.compiler.passes import routed

NPU2 = from_name("npu2")
F32 = np.float32
IN, OUT, HOST_ROLE, W, PART = FifoRole.INPUT, FifoRole.OUTPUT, FifoRole.HOST, FifoRole.WEIGHTS, FifoRole.PART


def tile(col, row) -> Tile:
    return Tile(col, row, TileKind.COMPUTE)


def mem(col) -> Tile:
    return Tile(col, 1, TileKind.MEM)


def routes_of(program, device=NPU2):
    return routed(program, device)[1]


def ends(routes) -> list[tuple]:
    return [(r.fifo.name, r.role, r.group, r.producer, r.consumers, r.shared_memory) for r in routes.fifos]


def test_a_lone_group_loads_from_the_host_and_returns_to_it():
    routes = routes_of(designs.trace(designs.add_one()))
    assert ends(routes) == [("g0_in", IN, "g0", HOST, (tile(0, 2),), False),
                            ("g0_host", HOST_ROLE, "g0", tile(0, 2), (HOST,), False)]
    assert (routes.forwards, routes.relays, routes.rules) == ({"g0": {}}, (), ())


def test_the_emit_reads_a_groups_out_through_shared_memory_and_feeds_the_host():
    routes = routes_of(designs.trace(designs.walk(8)))
    assert [r.fifo for r in routes.fifos] == [FifoId("g0", Stem.IN), FifoId("g0", Stem.HOST), FifoId("g0", Stem.OUT),
                                              FifoId(EMIT, Stem.IN), FifoId(None, Stem.FEEDBACK)]
    assert ends(routes) == [
        ("g0_in", IN, "g0", HOST, (tile(0, 2),), False),
        ("g0_host", HOST_ROLE, "g0", tile(0, 2), (HOST,), False),
        ("g0_out", OUT, "g0", tile(0, 2), (tile(0, 3),), True),
        ("emit_in", FifoRole.EMIT_IN, "emit", HOST, (tile(0, 3),), False),
        ("feedback", FifoRole.FEEDBACK, "emit", tile(0, 3), (HOST,), False)]


def test_an_input_two_groups_read_is_forwarded_by_the_first():
    """forward_shared_input: the MLP layer's x, loaded by the RMSNorm group, reaches the MatVec
    group in g0_out (a neighbour: shared memory), so g1_in holds w alone."""
    program = designs.trace(designs.mlp_layer())
    routes = routes_of(program)
    x = program.inputs[0]
    assert routes.forwards == {"g0": {x: ("g1",)}}
    assert forwarded_to(routes.forwards, "g1", x) and not forwarded_to(routes.forwards, "g0", x)
    assert ends(routes) == [("g0_in", IN, "g0", HOST, (tile(0, 2),), False),
                            ("g0_out", OUT, "g0", tile(0, 2), (tile(0, 3),), True),
                            ("g1_in", IN, "g1", HOST, (tile(0, 3),), False),
                            ("g1_host", HOST_ROLE, "g1", tile(0, 3), (HOST,), False)]
    assert [rule for rule, _ in routes.rules] == [Rule.FORWARD_SHARED_INPUT]


def test_a_split_group_streams_its_matrix_through_a_mem_tile_per_lane_and_joins_its_parts():
    """A MatVec over a 512 KiB matrix split over 4 tiles through 4 shim channels
    (`stream_over_shim_channels`): each lane's rows into its own mem tile (`_w<k>_mem`), one
    `_w<p>` and one `_part<p>` per core, the parts joined on mem_0_1, the result to the host; on
    npu1, whose grid reads the matrix through no more shim channels than the split, so the split is taken."""
    routes = routes_of(designs.trace(designs.big_matvec()), from_name("npu1"))
    cores = [tile(0, r) for r in range(2, 6)]
    assert ends(routes) == [
        ("g0_in", IN, "g0", HOST, tuple(cores), False),
        *[(f"g0_w{k}_mem", W, "g0", HOST, (mem(k),), False) for k in range(4)],
        *[(f"g0_w{p}", W, "g0", mem(p), (t,), False) for p, t in enumerate(cores)],
        *[(f"g0_part{p}", PART, "g0", t, (mem(0),), False) for p, t in enumerate(cores)],
        ("g0_host", HOST_ROLE, "g0", mem(0), (HOST,), False)]


def test_a_grid_sends_a_rows_and_b_columns_through_mem_tiles_and_joins_each_column():
    """tile_matmul_over_array: a 256-cube MatMul on npu2's 4 x 8 cores: per grid row `_a<r>_mem`
    and `_a<r>` broadcast along the row, per column `_b<c>_mem`, `_b<c>` down the column, a
    `_part<r>_<c>` per core and a `_host<c>` per column."""
    a, b = designs.operands(256, 256, 256, F32)
    routes = routes_of(designs.Product(b).trace(a=(a.shape, F32)))
    assert Counter(r.role for r in routes.fifos) == {W: 24, PART: 32, HOST_ROLE: 8}
    by_name = {r.fifo.name: r for r in routes.fifos}
    assert by_name["g0_a1"].producer == mem(1) and by_name["g0_a1"].consumers == tuple(tile(c, 3) for c in range(8))
    assert by_name["g0_b5"].producer == mem(5) and by_name["g0_b5"].consumers == tuple(tile(5, r) for r in range(2, 6))
    assert (by_name["g0_part2_6"].producer, by_name["g0_part2_6"].consumers) == (tile(6, 4), (mem(6),))
    assert (by_name["g0_host7"].producer, by_name["g0_host7"].consumers) == (mem(7), (HOST,))


def test_a_stream_splits_each_input_per_column_and_joins_each_columns_parts():
    """stream_elementwise: x + y over 65536 float32 on 2 x 8 cores: per column and input a
    `_x<i>_<c>_mem` split into one `_x<i>_<r>_<c>` per core, per core a `_part<r>_<c>`, per
    column a `_host<c>`; no `_in` (no per-call word)."""
    spec = ((65536,), F32)
    routes = routes_of(designs.Sum().trace(x=spec, y=spec))
    assert Counter(r.role for r in routes.fifos) == {W: 48, PART: 16, HOST_ROLE: 8}
    column3 = [r.fifo.name for r in routes.fifos if mem(3) in (r.producer, *r.consumers)]
    assert column3 == ["g0_x0_3_mem", "g0_x0_0_3", "g0_x0_1_3", "g0_x1_3_mem", "g0_x1_0_3", "g0_x1_1_3",
                       "g0_part0_3", "g0_part1_3", "g0_host3"]


def test_a_core_no_carrier_can_bring_within_its_channels_is_refused_with_its_names():
    program = designs.trace(designs.add_one())
    a_in, a_w, a_out = FifoId("a", Stem.IN), FifoId("a", Stem.W), FifoId("a", Stem.OUT)
    carrier = CoreInputs("a", tile(0, 2), (a_in, a_w), (a_in, a_w), carrier=a_out)
    taken = (a_out, FifoId("b", Stem.OUT), FifoId("c", Stem.OUT))
    reader = CoreInputs("r", tile(1, 2), taken, taken)
    with pytest.raises(PlacementError) as err:
        choose_relays(program, [carrier, reader], NPU2)
    assert all(name in str(err.value) for name in ("AddOne", "group r", "tile_1_2", "a_out, b_out, c_out"))
