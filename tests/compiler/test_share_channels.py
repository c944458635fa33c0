"""The `share_shim_channels` rule (iron/compiler/channels.py, applied by shims.py): when
a design needs more shim MM2S or S2MM channels than the device has, the `_in` FIFOs of several
groups become one shim -> mem tile FIFO split to each group, and their `_host` FIFOs one mem-tile
join into a mem -> shim FIFO; inputs that wait for another group's state write, and outputs a
later group waits for, keep their own channels. Plans pinned, then run on the emulator against
reference()."""
import importlib.util
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import aie_utils
import iron
from aie_utils import from_name
from iron.compiler.channels import MemChannels, SharedChannel, ShimRequest, share_shim_channels
from iron.compiler.compile import compile_program
from iron.kernels import Add, Copy, Exp
from iron.plan.fifos import EMIT_IN, FifoId, Stem
from iron.plan.mlir import print_mlir
from iron.plan.plan import Direction, Dma, FifoRole, Link, Tile, TileKind, Wait
from iron.plan.rules import Rule

F32 = np.dtype(np.float32)
I32 = np.dtype(np.int32)
BF16 = np.dtype(ml_dtypes.bfloat16)
NPU1 = from_name("npu1")
DECODER = Path(__file__).resolve().parents[2] / "programming_guide" / "section-8" / "decoder.py"


@pytest.fixture(autouse=True)
def emulator(monkeypatch):
    monkeypatch.setenv("IRON_BACKEND", "emulator")
    monkeypatch.setenv("IRON_QUIET", "1")


def shares(plan) -> list[str]:
    return [what for rule, what in plan.rules if rule == Rule.SHARE_SHIM_CHANNELS]


def shared(plan) -> list[tuple]:
    """Each shared FIFO: (name, object bytes, its mem tile, the members it is split into or joined
    from, their byte offsets in its objects)."""
    made = []
    for f in plan.fifos:
        if f.role in (FifoRole.SHARED_IN, FifoRole.SHARED_HOST):
            link = next(k for k in plan.links if f.name in (*k.sources, *k.destinations))
            split = f.role is FifoRole.SHARED_IN
            made.append((f.name, f.nbytes, link.tile.name, link.destinations if split else link.sources,
                         link.destination_offsets if split else link.source_offsets))
    return made


def shim_channels(plan) -> dict[Direction, int]:
    """How many FIFOs have a shim tile at their MM2S (host to device) and S2MM ends."""
    return {Direction.MM2S: sum(f.producer.kind is TileKind.SHIM for f in plan.fifos),
            Direction.S2MM: sum(any(t.kind is TileKind.SHIM for t in f.consumers) for f in plan.fifos)}


def route(plan, name: str) -> tuple[str, tuple[str, ...]]:
    f = plan.fifo(name)
    return f.producer.name, tuple(t.name for t in f.consumers)


def moves(plan) -> list[tuple[str, str]]:
    return [(op.direction, op.fifo) if isinstance(op, Dma) else ("wait", op.fifo) for op in plan.sequence]


class Rows(iron.Graph):
    """n independent groups: row i of the input x plus row i of a weight, each an output."""

    def __init__(self, n: int):
        self.w = iron.weight(np.arange(n * 8, dtype=np.int32).reshape(n, 8) * 7)

    def body(self, x):
        return tuple(Add.step(x[i], self.w[i]) for i in range(self.w.shape[0]))


def run_rows(n: int, device: str):
    graph = Rows(n)
    compiled = graph.compile(device=device, x=((n, 8), I32))
    x = np.arange(n * 8, dtype=np.int32).reshape(n, 8) - 5
    return compiled, compiled(x), Rows(n).reference(x)


def test_twelve_groups_share_channels_on_npu1_and_equal_the_reference():
    compiled, got, want = run_rows(12, "npu1")
    assert len(got) == 12 and all(np.array_equal(g, w) for g, w in zip(got, want))
    plan = compiled.plan
    assert shared(plan) == [
        (FifoId(None, Stem.SHARED_IN, (0,)), 256, "mem_0_1", (FifoId("g0", Stem.IN), FifoId("g1", Stem.IN), FifoId("g2", Stem.IN), FifoId("g3", Stem.IN)), (0, 64, 128, 192)),
        (FifoId(None, Stem.SHARED_HOST, (0,)), 128, "mem_0_1", (FifoId("g0", Stem.HOST), FifoId("g1", Stem.HOST), FifoId("g2", Stem.HOST), FifoId("g3", Stem.HOST)), (0, 32, 64, 96)),
        (FifoId(None, Stem.SHARED_IN, (1,)), 128, "mem_1_1", (FifoId("g4", Stem.IN), FifoId("g5", Stem.IN)), (0, 64)),
        (FifoId(None, Stem.SHARED_HOST, (1,)), 64, "mem_1_1", (FifoId("g4", Stem.HOST), FifoId("g5", Stem.HOST)), (0, 32))]
    assert shim_channels(plan) == {Direction.MM2S: 8, Direction.S2MM: 8} and len(shares(plan)) == 6
    mem0, mem1 = Tile(0, 1, TileKind.MEM), Tile(1, 1, TileKind.MEM)
    assert plan.links == (
        Link(mem0, (FifoId(None, Stem.SHARED_IN, (0,)),), (FifoId("g0", Stem.IN), FifoId("g1", Stem.IN), FifoId("g2", Stem.IN), FifoId("g3", Stem.IN)), destination_offsets=(0, 64, 128, 192)),
        Link(mem1, (FifoId(None, Stem.SHARED_IN, (1,)),), (FifoId("g4", Stem.IN), FifoId("g5", Stem.IN)), destination_offsets=(0, 64)),
        Link(mem0, (FifoId("g0", Stem.HOST), FifoId("g1", Stem.HOST), FifoId("g2", Stem.HOST), FifoId("g3", Stem.HOST)), (FifoId(None, Stem.SHARED_HOST, (0,)),), source_offsets=(0, 32, 64, 96)),
        Link(mem1, (FifoId("g4", Stem.HOST), FifoId("g5", Stem.HOST)), (FifoId(None, Stem.SHARED_HOST, (1,)),), source_offsets=(0, 32)),
    )
    assert route(plan, FifoId(None, Stem.SHARED_IN, (0,))) == ("shim_0_0", ("mem_0_1",))
    assert route(plan, FifoId("g2", Stem.IN)) == ("mem_0_1", ("tile_0_4",))
    assert route(plan, FifoId("g2", Stem.HOST)) == ("tile_0_4", ("mem_0_1",))
    assert route(plan, FifoId(None, Stem.SHARED_HOST, (1,))) == ("mem_1_1", ("shim_1_0",))
    assert route(plan, FifoId("g6", Stem.IN)) == ("shim_1_0", ("tile_1_3",))


def test_shared_moves_fill_the_parts_in_order_inputs_first_outputs_last():
    plan = run_rows(12, "npu1")[0].plan
    shared = [(op.direction, op.fifo, op.buffer, op.offset, op.bd_id, op.shim.name)
              for op in plan.sequence[:14]]
    assert shared == [
        (Direction.MM2S, FifoId(None, Stem.SHARED_IN, (0,)), "inputs", 0, 0, "shim_0_0"), (Direction.MM2S, FifoId(None, Stem.SHARED_IN, (0,)), "consts", 0, 1, "shim_0_0"),
        (Direction.MM2S, FifoId(None, Stem.SHARED_IN, (0,)), "inputs", 8, 2, "shim_0_0"), (Direction.MM2S, FifoId(None, Stem.SHARED_IN, (0,)), "consts", 8, 3, "shim_0_0"),
        (Direction.MM2S, FifoId(None, Stem.SHARED_IN, (0,)), "inputs", 16, 4, "shim_0_0"), (Direction.MM2S, FifoId(None, Stem.SHARED_IN, (0,)), "consts", 16, 5, "shim_0_0"),
        (Direction.MM2S, FifoId(None, Stem.SHARED_IN, (0,)), "inputs", 24, 6, "shim_0_0"), (Direction.MM2S, FifoId(None, Stem.SHARED_IN, (0,)), "consts", 24, 7, "shim_0_0"),
        (Direction.S2MM, FifoId(None, Stem.SHARED_HOST, (0,)), "outputs", 0, 8, "shim_0_0"), (Direction.S2MM, FifoId(None, Stem.SHARED_HOST, (0,)), "outputs", 8, 9, "shim_0_0"),
        (Direction.S2MM, FifoId(None, Stem.SHARED_HOST, (0,)), "outputs", 16, 10, "shim_0_0"), (Direction.S2MM, FifoId(None, Stem.SHARED_HOST, (0,)), "outputs", 24, 11, "shim_0_0"),
        (Direction.MM2S, FifoId(None, Stem.SHARED_IN, (1,)), "inputs", 32, 0, "shim_1_0"), (Direction.MM2S, FifoId(None, Stem.SHARED_IN, (1,)), "consts", 32, 1, "shim_1_0"),
    ]
    assert [op.fifo for op in plan.sequence if isinstance(op, Wait)] == [
        FifoId(None, Stem.SHARED_HOST, (0,)), FifoId(None, Stem.SHARED_HOST, (1,)), FifoId("g6", Stem.HOST), FifoId("g7", Stem.HOST), FifoId("g8", Stem.HOST), FifoId("g9", Stem.HOST), FifoId("g10", Stem.HOST), FifoId("g11", Stem.HOST)]


def test_a_design_that_fits_shares_nothing():
    plan = run_rows(8, "npu1")[0].plan
    assert shares(plan) == [] and plan.links == ()
    assert [f.name for f in plan.fifos if f.name.stem in (Stem.SHARED_IN, Stem.SHARED_HOST)] == []


class Three(iron.Graph):
    def body(self, x, y, z):
        return Exp.step(x), Exp.step(y), Exp.step(z)


def test_members_of_different_element_sizes_are_linked_as_int32():
    specs = {"x": ((16,), BF16), "y": ((8,), F32), "z": ((8,), F32)}
    compiled = Three().compile(device="npu1_1col", **specs)
    plan = compiled.plan
    assert [(f.name, f.nbytes, f.dtype) for f in plan.fifos if f.name.group in (None, "g0", "g1")] == [
        (FifoId(None, Stem.SHARED_IN, (0,)), 64, I32), (FifoId("g0", Stem.IN), 32, I32), (FifoId(None, Stem.SHARED_HOST, (0,)), 64, I32), (FifoId("g0", Stem.HOST), 32, I32),
        (FifoId("g1", Stem.IN), 32, I32), (FifoId("g1", Stem.HOST), 32, I32)]
    assert (plan.fifo(FifoId("g2", Stem.IN)).dtype, plan.fifo(FifoId("g2", Stem.IN)).producer.name) == (F32, "shim_0_0")
    mlir = print_mlir(plan)
    assert "aie.objectfifo.link [@shared_in0] -> [@g0_in, @g1_in] ([] [0, 8])" in mlir
    assert "aie.objectfifo.link [@g0_host, @g1_host] -> [@shared_host0] ([0, 8] [])" in mlir
    args = (np.linspace(-1, 1, 16).astype(BF16), np.linspace(0, 1, 8).astype(F32), np.linspace(1, 2, 8).astype(F32))
    for got, want in zip(compiled(*args), Three().reference(*args)):
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got.astype(F32), want.astype(F32), rtol=1e-6, atol=1e-6)


class WriteThenRows(iron.Graph):
    """g0 copies x[0] into state s, g1 adds s to w[0] (its input waits for g0's write), then
    n - 1 independent groups x[i] + w[i]."""

    def __init__(self, n: int):
        self.s = iron.state((8,), np.int32, name="s")
        self.w = iron.weight(np.arange(n * 8, dtype=np.int32).reshape(n, 8))

    def body(self, x):
        Copy.step(x[0], out=self.s)
        first = Add.step(self.s, self.w[0])
        return (first, *(Add.step(x[i], self.w[i]) for i in range(1, self.w.shape[0])))


def test_inputs_that_wait_and_outputs_waited_for_keep_their_channels():
    compiled = WriteThenRows(6).compile(device="npu1_2col", x=((6, 8), I32))
    plan = compiled.plan
    assert sorted(shared(plan), key=str) == [
        (FifoId(None, Stem.SHARED_HOST, (0,)), 96, "mem_0_1", (FifoId("g1", Stem.HOST), FifoId("g2", Stem.HOST), FifoId("g3", Stem.HOST)), (0, 32, 64)),
        (FifoId(None, Stem.SHARED_HOST, (1,)), 64, "mem_1_1", (FifoId("g4", Stem.HOST), FifoId("g5", Stem.HOST)), (0, 32)),
        (FifoId(None, Stem.SHARED_IN, (0,)), 160, "mem_0_1", (FifoId("g0", Stem.IN), FifoId("g2", Stem.IN), FifoId("g3", Stem.IN)), (0, 32, 96)),
        (FifoId(None, Stem.SHARED_IN, (1,)), 128, "mem_1_1", (FifoId("g4", Stem.IN), FifoId("g5", Stem.IN)), (0, 64))]
    assert shim_channels(plan) == {Direction.MM2S: 4, Direction.S2MM: 4}
    # g1_in (s, w[0]) waits for g0's write of s; g0_host is waited for, so neither is shared
    assert moves(plan) == [
        *[(Direction.MM2S, FifoId(None, Stem.SHARED_IN, (0,)))] * 5, (Direction.S2MM, FifoId("g0", Stem.HOST)), ("wait", FifoId("g0", Stem.HOST)), (Direction.MM2S, FifoId("g1", Stem.IN)),
        (Direction.MM2S, FifoId("g1", Stem.IN)), *[(Direction.S2MM, FifoId(None, Stem.SHARED_HOST, (0,)))] * 3, *[(Direction.MM2S, FifoId(None, Stem.SHARED_IN, (1,)))] * 4,
        *[(Direction.S2MM, FifoId(None, Stem.SHARED_HOST, (1,)))] * 2, (Direction.MM2S, FifoId("g6", Stem.IN)), (Direction.MM2S, FifoId("g6", Stem.IN)), (Direction.S2MM, FifoId("g6", Stem.HOST)),
        ("wait", FifoId(None, Stem.SHARED_HOST, (0,))), ("wait", FifoId(None, Stem.SHARED_HOST, (1,))), ("wait", FifoId("g6", Stem.HOST))]
    reference = WriteThenRows(6)
    for step in range(2):   # twice: the state s persists
        x = np.arange(48, dtype=np.int32).reshape(6, 8) * (step + 2)
        got, want = compiled(x), reference.reference(x)
        assert len(got) == 6 and all(np.array_equal(g, w) for g, w in zip(got, want))
    assert np.array_equal(compiled.read("s"), reference.read("s"))


def requests(*specs) -> list[ShimRequest]:
    """ShimRequests ("name", col, shareable) of 64-byte MM2S FIFOs."""
    return [ShimRequest(name, Direction.MM2S, col, 64, shareable) for name, col, shareable in specs]


def test_a_mem_tile_without_free_channels_passes_the_merge_to_the_nearest():
    device = from_name("npu1_2col")    # 4 MM2S channels for 5 FIFOs
    mem = MemChannels(device)
    mem.take_on(Tile(0, 1, TileKind.MEM), 0, 5)   # mem_0_1 has one MM2S channel left: a split of 2 needs 2
    wanted = requests(("a", 0, True), ("b", 0, True), ("c", 0, True), ("d", 1, False), ("e", 1, False))
    found, _ = share_shim_channels(Rows(1).trace(x=((1, 8), I32)), wanted, device, mem, 2)
    assert found == [SharedChannel(FifoId(None, Stem.SHARED_IN, (0,)), Direction.MM2S, Tile(1, 1, TileKind.MEM), ("a", "b"), (0, 64), 128)]
    assert mem.used == {0: (0, 5, 0), 1: (1, 2, 256)}   # (channels in, out, bytes held) per column


def test_a_mem_tile_without_memory_passes_the_merge_to_the_nearest():
    device = from_name("npu1_2col")
    mem = MemChannels(device)
    mem.take_on(Tile(0, 1, TileKind.MEM), 0, 0, 512 * 1024 - 255)   # a merge of two 64-byte FIFOs holds 256 bytes
    wanted = requests(("a", 0, True), ("b", 0, True), ("c", 0, True), ("d", 1, False), ("e", 1, False))
    found, _ = share_shim_channels(Rows(1).trace(x=((1, 8), I32)), wanted, device, mem, 2)
    assert [(s.mem.name, s.members) for s in found] == [("mem_1_1", ("a", "b"))]


def test_single_shareable_fifos_of_neighbouring_columns_merge():
    device = from_name("npu1_2col")
    wanted = requests(("a", 0, True), ("b", 0, False), ("c", 1, True), ("d", 1, False), ("e", 1, False))
    found, rules = share_shim_channels(Rows(1).trace(x=((1, 8), I32)), wanted, device, MemChannels(device), 2)
    assert found == [SharedChannel(FifoId(None, Stem.SHARED_IN, (0,)), Direction.MM2S, Tile(0, 1, TileKind.MEM), ("a", "c"), (0, 64), 128)]
    assert [rule for rule, _ in rules] == [Rule.SHARE_SHIM_CHANNELS] * 2


def load_decoder():
    spec = importlib.util.spec_from_file_location("decoder", DECODER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_decoder_shares_channels_on_npu1_and_generates_the_numpy_tokens(capsys):
    decoder = load_decoder()
    plan = compile_program(decoder.Decoder().trace(), NPU1)
    assert shared(plan) == [   # the smallest inputs, each after the Waits it needs: one merge of 8836 bytes
        (FifoId(None, Stem.SHARED_IN, (0,)), 8836, "mem_3_1", tuple(FifoId(f"g{g}", Stem.IN) for g in (0, 1, 5, 7, 8, 11)),
         (0, 384, 4480, 4484, 8580, 8708))]
    assert shim_channels(plan)[Direction.MM2S] == 8
    assert route(plan, FifoId("g4", Stem.IN)) == ("shim_1_0", ("tile_1_5",))   # reads kcache, which g2 writes first
    assert route(plan, FifoId("g6", Stem.IN)) == ("shim_1_0", ("tile_1_3",))   # reads vcache, which g3 writes first
    previous = aie_utils.get_current_device()
    try:
        assert decoder.main(["--device", "npu1", "--tokens", "5"]) == 0
    finally:
        aie_utils.set_current_device(previous)   # main() sets the device from --device
    assert "host-driven (npu1): [36, 55, 18, 1, 36] -> matches numpy (token for token)" in capsys.readouterr().out


def test_the_two_layer_decoder_fits_npu2():
    decoder = load_decoder()
    plan = compile_program(decoder.Decoder(layers=2).trace(), from_name("npu2"))
    assert shim_channels(plan)[Direction.MM2S] == 16
    assert [link.destinations for link in plan.links] == [   # the smallest merges first
        tuple(FifoId(f"g{g}", Stem.IN) for g in (16, 18, 19)), (*(FifoId(f"g{g}", Stem.IN) for g in (0, 5, 8, 11, 22)), EMIT_IN),
        tuple(FifoId(f"g{g}", Stem.IN) for g in (12, 13, 14))]
    assert (len(plan.cores), plan.emit.tile.name) == (27, "tile_6_4")
