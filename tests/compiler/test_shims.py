"""Host FIFOs meet shim tiles (iron/compiler/shims.py): `shim_requests` says which host FIFOs may
share a shim channel (an `_in`, one that waits for a state write only with inputs moving after
the same Waits, a core's `_host` no Wait needs before the end, the Emit's `emit_in`), and
`share_shim_channels` merges the smallest first; `shim_shortfall` (the rule
`shim_channels_bound`) refuses, from the routes alone, host FIFOs of one direction that need more
shim channels than the device has however they are merged, saying how many leading groups fit;
`moved_together` makes the members' moves one shared FIFO's, inputs where the first member's were,
outputs where the last member's were; `connect` puts every host end on a shim tile and cuts the
moves into Dma ops. Merging itself is `share_shim_channels`' (test_share_channels.py)."""
import numpy as np

from aie_utils import from_name
from iron.compiler.channels import MemChannels, SharedChannel, ShimRequest, share_shim_channels
from iron.compiler.lower import lower
from iron.compiler.route import HOST, Route, Routes
from iron.compiler.sequence import Move
from iron.compiler.shims import (
    ShimShortfall,
    connect,
    moved_together,
    shim_requests,
    shim_shortfall,
)
from iron.compiler.words import Access
from iron.plan.fifos import FifoId, Stem
from iron.plan.plan import Direction, Dma, FifoRole, Tile, TileKind, Wait
from tests.compiler import designs
from tests.compiler.passes import routed

NPU2, ONE_COLUMN = from_name("npu2"), from_name("npu2_1col")   # 2 shim MM2S channels on one column
CORE, MEM = Tile(0, 2, TileKind.COMPUTE), Tile(0, 1, TileKind.MEM)
MM2S, S2MM = Direction.MM2S, Direction.S2MM


def write_then_read():
    """WriteThenRead lowered on npu2: g0 accumulates into s, g1 reads s (so waits for g0's write)."""
    program = designs.WriteThenRead().trace(x=((8,), np.float32))
    layout, routes = routed(program, NPU2)
    return lower(program, NPU2, layout, routes)


def test_inputs_that_wait_share_only_after_the_same_waits_and_outputs_waited_for_may_not_share():
    assert shim_requests(write_then_read()) == [
        ShimRequest(FifoId("g0", Stem.IN), MM2S, 0, 64, True, 1, (0,), False),   # x and s, before any write
        ShimRequest(FifoId("g0", Stem.HOST), S2MM, 0, 32, False),               # g1 waits for it
        ShimRequest(FifoId("g1", Stem.IN), MM2S, 0, 32, True, 1, (1,), True),    # reads s after g0's write
        ShimRequest(FifoId("g1", Stem.HOST), S2MM, 0, 32, True)]


def inputs(*specs) -> list[ShimRequest]:
    """64-byte MM2S ShimRequests (name, bytes, the Waits before each of its 2 rounds, waits) on column 0."""
    return [ShimRequest(name, MM2S, 0, nbytes, True, 2, points, waits) for name, nbytes, points, waits in specs]


def test_a_waiting_input_shares_only_with_inputs_after_its_waits_the_smallest_merge_first():
    """Five inputs of a looping iteration on one column's two MM2S channels: the position word
    (no wait) joins the norm's weights (after the first Wait), the cheapest merge; then the
    caches read after the second Wait merge with the residual, never with the norm's weights."""
    wanted = inputs(("norm", 4608, (1, 3), True), ("pos", 4, (1, 3), False), ("k0", 32772, (2, 4), True),
                    ("k1", 32772, (2, 4), True), ("x", 4608, (2, 4), True))
    found, _ = share_shim_channels(designs.WriteThenRead().trace(x=((8,), np.float32)), wanted, ONE_COLUMN,
                                   MemChannels(ONE_COLUMN), 2)
    assert [(s.members, s.offsets, s.loops) for s in found] == [
        (("norm", "pos"), (0, 4608), 2), (("k0", "k1", "x"), (0, 32772, 65544), 2)]


def test_connect_puts_every_host_end_on_a_shim_tile_and_cuts_the_moves():
    connected = connect(write_then_read(), NPU2)
    shim = Tile(0, 0, TileKind.SHIM)
    assert all(HOST not in (f.producer, *f.consumers) for f in connected.fifos)
    assert [(str(f.name), f.producer, f.consumers) for f in connected.fifos] == [
        ("g0_in", shim, (CORE,)), ("g0_host", CORE, (shim,)),
        ("g1_in", shim, (Tile(0, 3, TileKind.COMPUTE),)), ("g1_host", Tile(0, 3, TileKind.COMPUTE), (shim,))]
    assert [(op.direction, str(op.fifo), op.buffer) if isinstance(op, Dma) else op for op in connected.sequence] == [
        (MM2S, "g0_in", "inputs"), (MM2S, "g0_in", "states"), (S2MM, "g0_host", "states"), Wait(FifoId("g0", Stem.HOST)),
        (MM2S, "g1_in", "states"), (S2MM, "g1_host", "outputs"), Wait(FifoId("g1", Stem.HOST))]


def route(group: str, stem: Stem, *at: int) -> Route:
    """A FIFO from the host into group's core (or its mem tile, for a stream's blocks)."""
    fifo = FifoId(group, stem, at, mem=stem is not Stem.IN)
    return Route(fifo, group, HOST, (MEM if fifo.role is FifoRole.WEIGHTS else CORE,))


def test_host_fifos_that_may_not_share_beyond_the_channels_are_a_shortfall():
    """Blocks of streamed inputs (a mem tile's) never share: three of them on one column's two
    MM2S channels leave only the first group within them."""
    streams = Routes((route("g0", Stem.X, 0), route("g0", Stem.X, 1),
                      route("g1", Stem.X, 0)), {})
    assert shim_shortfall(streams, ONE_COLUMN) == ShimShortfall(1)
    assert shim_shortfall(streams, NPU2) is None


def test_inputs_that_may_share_are_never_a_shortfall():
    """Any number of `_in`s merge into one channel at worst."""
    inputs = Routes(tuple(route(f"g{g}", Stem.IN) for g in range(5)), {})
    assert shim_shortfall(inputs, ONE_COLUMN) is None
    mixed = Routes((route("g0", Stem.X, 0), route("g0", Stem.X, 1),
                    *inputs.fifos), {})
    assert shim_shortfall(mixed, ONE_COLUMN) == ShimShortfall(0)   # 2 fixed + 1 shared channel > 2


def move(direction: Direction, group: str, stem: Stem, offset: int) -> Move:
    return Move(direction, FifoId(group, stem), "inputs" if direction is MM2S else "outputs",
                Access(offset, ((4, 1),)))


def test_shared_moves_go_where_the_first_input_or_the_last_output_was():
    shared_in = FifoId(None, Stem.SHARED_IN, (0,))
    a, b, other = move(MM2S, "a", Stem.IN, 0), move(MM2S, "b", Stem.IN, 8), move(MM2S, "c", Stem.IN, 16)
    merged = SharedChannel(shared_in, MM2S, MEM, (FifoId("a", Stem.IN), FifoId("b", Stem.IN)), (0, 16), 32)
    together = moved_together([a, other, Wait(FifoId("c", Stem.HOST)), b], merged)
    assert [(m.fifo, m.access.offset) if isinstance(m, Move) else m for m in together] == [
        (shared_in, 0), (shared_in, 8), (other.fifo, 16), Wait(FifoId("c", Stem.HOST))]
    shared_host = FifoId(None, Stem.SHARED_HOST, (0,))
    x, y = move(S2MM, "a", Stem.HOST, 0), move(S2MM, "b", Stem.HOST, 4)
    joined = SharedChannel(shared_host, S2MM, MEM, (FifoId("a", Stem.HOST), FifoId("b", Stem.HOST)), (0, 16), 32)
    together = moved_together([x, other, y], joined)
    assert [(m.fifo, m.access.offset) for m in together] == [(other.fifo, 16), (shared_host, 0), (shared_host, 4)]
