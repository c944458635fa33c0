"""check_plan (iron/plan/invariants.py): every test design's Plan keeps the device rules on
npu1 and npu2, and broken Plans are refused with exact texts."""

import dataclasses

import numpy as np
import pytest

import iron
from aie_utils import from_name
from iron.compiler.compile import compile_program
from iron.errors import DoesNotFit, PlanError
from iron.kernels import Copy, Scale
from iron.plan.fifos import FifoId, Stem
from iron.plan.invariants import check_plan, tile_locks
from iron.plan.memory import tile_memory
from iron.plan.plan import (
    Buffer,
    Dma,
    Fifo,
    Imm,
    KernelStep,
    Load,
    Loop,
    Ptr,
    ScalarStep,
    Tile,
    TileKind,
    Wait,
    WordOp,
    WordRef,
)
from tests.compiler import designs
from tests.quotes import quoted

DESIGNS = {
    "walk": lambda: designs.walk(8),
    "add_one": lambda: designs.add_one(1024),
    "accumulate_at": lambda: designs.accumulate_at(64, 4),
    "mlp_layer_f32": lambda: designs.mlp_layer(64, np.float32),
    "mlp_layer_bf16": lambda: designs.mlp_layer(64, iron.bfloat16),
    "mlp_4x256": lambda: designs.mlp(4, 256),
    "big_matvec": lambda: designs.big_matvec(512, 256),
}
G0_IN, G0_HOST, G0_OUT = FifoId("g0", Stem.IN), FifoId("g0", Stem.HOST), FifoId("g0", Stem.OUT)


def plan_of(name: str, device: str):
    return compile_program(designs.trace(DESIGNS[name]()), from_name(device))


def moved_and_taken(plan) -> tuple[dict, dict]:
    """Per shim FIFO: words the sequence moves, and words its cores take (objects x size)."""
    moved: dict[str, int] = {}
    for op in plan.sequence:
        if isinstance(op, Dma):
            moved[op.fifo] = moved.get(op.fifo, 0) + op.nwords
    return moved, {f.name: f.nbytes // 4 for f in plan.fifos}


@pytest.mark.parametrize("device", ["npu2", "npu1"])
@pytest.mark.parametrize("name", list(DESIGNS))
def test_every_design_keeps_the_device_rules(name, device):
    plan = plan_of(name, device)
    check_plan(plan)
    d = plan.device
    assert all(0 <= t.col < d.n_cols for t in plan.tiles)
    assert all(t in plan.tiles for f in plan.fifos for t in (f.producer, *f.consumers))
    for tile, held in tile_memory(plan).items():
        budget = d.compute.data_memory_bytes if tile.kind is TileKind.COMPUTE else d.mem.data_memory_bytes
        assert sum(n for _, n in held) <= budget
    dmas = [op for op in plan.sequence if isinstance(op, Dma)]
    assert all(1 <= op.sizes[0] <= 64 and max(op.sizes[1:]) <= 1023 and 0 <= op.bd_id < 16 for op in dmas)
    moved, object_words = moved_and_taken(plan)
    assert all(moved[f] % object_words[f] == 0 for f in moved)


def test_the_mlp_moves_every_matrix_once_per_launch():
    plan = plan_of("mlp_4x256", "npu2")
    moved, _ = moved_and_taken(plan)
    lanes = {g: [f for f in moved if f.group == f"g{g}" and f.stem is Stem.W and f.mem] for g in (1, 3, 5, 7)}
    assert [sum(moved[f] for f in lanes[g]) for g in lanes] == [256 * 256] * 4   # through 4, 4, 2 and 1 shim channels
    assert [len(lanes[g]) for g in lanes] == [4, 4, 2, 1]


def broken(plan, *names: str, error=PlanError):
    """check_plan refuses `plan` with `error`, quoting `names` (the Plan, the op, FIFO or tile, the numbers)."""
    with pytest.raises(error) as err:
        check_plan(plan)
    quoted(err.value, *names)


def with_op(plan, index, **changes):
    ops = list(plan.sequence)
    ops[index] = dataclasses.replace(ops[index], **changes)
    return dataclasses.replace(plan, sequence=tuple(ops))


def test_a_bd_reused_before_a_wait_is_refused():
    plan = with_op(plan_of("walk", "npu1"), 1, bd_id=0)
    broken(plan, 'Walk', 'npu1', 'op 1', 'g0_host', 'BD 0', 'shim_0_0', 'op 0', 'g0_in')


def test_a_bd_freed_by_a_wait_on_a_tokened_mm2s_may_be_reused():
    plan = plan_of("walk", "npu1")
    first, *rest = plan.sequence
    ops = (dataclasses.replace(first, issue_token=True), Wait(G0_IN), *(
        dataclasses.replace(op, bd_id=0) if isinstance(op, Dma) and op.bd_id == 1 else op for op in rest))
    check_plan(dataclasses.replace(plan, sequence=ops))


def test_a_wait_on_a_fifo_without_a_shim_end_is_refused():
    plan = plan_of("mlp_layer_f32", "npu2")   # g0_out goes from one core to another
    plan = dataclasses.replace(plan, sequence=(Wait(G0_OUT), *plan.sequence))
    broken(plan, 'MLPLayer', 'npu2', 'op 0', 'g0_out')


def test_dma_sizes_over_the_limits_are_refused():
    plan = with_op(plan_of("add_one", "npu2"), 0, sizes=(1, 1, 1, 1024), strides=(0, 0, 0, 1))
    broken(plan, 'AddOne', 'npu2', 'op 0', 'g0_in', '(1, 1, 1, 1024)', '(0, 0, 0, 1)', 'BD 0', '1..64', '1..1023', '0..1048576')


def test_a_stride_0_inside_the_repeat_is_refused():
    """mlir-aie's verifier (docs/platform.md section 5): sending the same 32 words twice is
    [2, 1, 1, 32][0, 0, 0, 1]; [1, 1, 2, 32][0, 0, 0, 1] is "Stride 1 must be a positive integer"."""
    plan = plan_of("add_one", "npu2")
    check_plan(with_op(plan, 0, sizes=(2, 1, 1, 512), strides=(0, 0, 0, 1)))
    check_plan(with_op(plan, 0, sizes=(1, 1, 2, 512), strides=(0, 0, 512, 1)))
    broken(with_op(plan, 0, sizes=(1, 1, 2, 512), strides=(0, 0, 0, 1)),
           'AddOne', 'npu2', 'op 0', 'g0_in', '(1, 1, 2, 512)', '(0, 0, 0, 1)', 'BD 0', '1..64', '1..1023', '0..1048576')


def test_a_dma_stride_over_the_shims_20_bit_field_is_refused():
    """docs/platform.md section 5: a shim BD stride is at most 2^20 words."""
    plan = with_op(plan_of("add_one", "npu2"), 0, sizes=(1, 1, 2, 512), strides=(0, 0, 2**20 + 1, 1))
    broken(plan, 'AddOne', 'npu2', 'op 0', 'g0_in', '(1, 1, 2, 512)', '(0, 0, 1048577, 1)', 'BD 0', '1..64', '1..1023', '0..1048576')
    at_limit = with_op(plan_of("add_one", "npu2"), 0, sizes=(1, 1, 2, 512), strides=(0, 0, 2**20, 1))
    broken(at_limit, 'AddOne', 'npu2', 'op 0', 'g0_in', '0..1049087', "'inputs'", '1024')


def test_a_wait_no_completion_token_can_satisfy_is_refused():
    """An MM2S Dma without issue_token raises no token: a Wait after only such ops never returns."""
    plan = plan_of("walk", "npu1")
    plan = dataclasses.replace(plan, sequence=(plan.sequence[0], Wait(G0_IN), *plan.sequence[1:]))
    broken(plan, 'Walk', 'npu1', 'op 1', 'g0_in', 'S2MM', 'issue_token')
    twice = with_op(plan, 0, issue_token=True)
    twice = dataclasses.replace(twice, sequence=(*twice.sequence[:2], Wait(G0_IN), *twice.sequence[2:]))
    broken(twice, 'Walk', 'npu1', 'op 2', 'g0_in', 'S2MM', 'issue_token')
    check_plan(with_op(plan, 0, issue_token=True))


def test_a_dma_reaching_past_its_buffer_is_refused():
    plan = with_op(plan_of("walk", "npu1"), 0, offset=1)   # node is at most 7: word 8 of 8
    broken(plan, 'Walk', 'npu1', 'op 0', 'g0_in', '1..8', "'consts'")


def test_every_dma_of_a_move_is_checked_against_its_buffer():
    """check_plan checks a move's FIFO end and buffer once for its Dmas, and each Dma's words."""
    plan = plan_of("add_one", "npu2")
    first = plan.sequence[0]
    halves = (dataclasses.replace(first, sizes=(1, 1, 1, 512), strides=(0, 0, 0, 1)),
              dataclasses.replace(first, offset=512, sizes=(1, 1, 1, 512), strides=(0, 0, 0, 1), bd_id=15))
    check_plan(dataclasses.replace(plan, sequence=(*halves, *plan.sequence[1:])))
    past = (halves[0], dataclasses.replace(halves[1], offset=513))
    broken(dataclasses.replace(plan, sequence=(*past, *plan.sequence[1:])), 'AddOne', 'npu2', 'op 1', 'g0_in',
           '513..1024', "'inputs'", '1024')


def test_a_sequence_moving_less_than_the_cores_take_is_refused():
    plan = plan_of("walk", "npu1")
    plan = dataclasses.replace(plan, sequence=plan.sequence[1:])
    broken(plan, 'Walk', 'npu1', 'g0_in', 'shim_0_0', 'tile_0_2')


def test_a_tile_outside_the_device_is_refused():
    plan = plan_of("walk", "npu1")
    plan = dataclasses.replace(plan, tiles=(*plan.tiles, Tile(4, 2, TileKind.COMPUTE)))
    broken(plan, 'Walk', 'npu1', 'tile_4_2', '(2, 3, 4, 5)')


def test_a_kernel_reading_past_its_object_is_refused():
    plan = plan_of("walk", "npu1")
    g0 = plan.functions[0]
    step = KernelStep.of(Copy, np.int32, (*g0.steps[0].args[:2], Imm(2)))
    plan = dataclasses.replace(plan, functions=(dataclasses.replace(g0, steps=(step, *g0.steps[1:])),))
    broken(plan, 'Walk', 'npu1', 'g0', '0..8', "'g0_in'", '4')


def test_an_emit_on_a_device_without_full_elf_is_refused():
    plan = plan_of("walk", "npu2")
    plan = dataclasses.replace(plan, device=from_name("npu1"), full_elf=False, image="xclbin")
    broken(plan, 'Walk', 'npu1')


def test_a_bounded_carried_word_is_refused():
    plan = plan_of("walk", "npu2")
    words = (dataclasses.replace(plan.words[0], bound=(0, 8), what="successor[node]"), *plan.words[1:])
    broken(dataclasses.replace(plan, words=words),
           'Walk', 'npu2', 'word 0', "'node'")


def test_a_word_computed_from_a_later_word_is_refused():
    plan = plan_of("walk", "npu1")
    words = (*plan.words[:4], dataclasses.replace(plan.words[4], a=WordRef(4)))
    broken(dataclasses.replace(plan, words=words),
           'Walk', 'npu1', 'word 4', "'steps + 1'", 'w4')


def test_a_tile_over_its_memory_does_not_fit():
    plan = plan_of("add_one", "npu2")
    big = Buffer("big", Tile(0, 2, TileKind.COMPUTE), 49152)
    with pytest.raises(DoesNotFit) as err:
        check_plan(dataclasses.replace(plan, buffers=(big,)))
    quoted(err.value, "AddOne", "tile_0_2", "Add#0", "74752", "65536", "big 49152", "g0_in@tile_0_2 16384")


def with_fifos(plan, *extra, **consumers):
    """`plan` plus FIFOs `extra`, with the consumers of some FIFOs replaced (name=(tile, ...))."""
    fifos = tuple(dataclasses.replace(f, consumers=consumers.get(str(f.name), f.consumers)) for f in plan.fifos)
    return dataclasses.replace(plan, fifos=(*fifos, *extra))


def test_a_compute_tile_taking_three_fifos_by_dma_is_refused():
    plan = plan_of("mlp_4x256", "npu2")   # g2 forwards the residual: g3's parts take g2_out and a stream
    again = tuple(Tile(c, r, TileKind.COMPUTE) for c, r in ((1, 4), (1, 3)))
    broken(with_fifos(plan, g1_out=again),
           'ExampleMLP', 'npu2', 'tile_1_3', 'S2MM', 'g1_out', 'g2_out', 'g3_w0')


def test_a_compute_tile_sending_three_fifos_by_dma_is_refused():
    plan = plan_of("walk", "npu1")
    core, shim = Tile(0, 2, TileKind.COMPUTE), Tile(0, 0, TileKind.SHIM)
    extra = [Fifo(FifoId("extra", Stem.OUT, (i,)), core, (shim,), 2, 4) for i in range(2)]
    broken(with_fifos(plan, *extra),
           'Walk', 'npu1', 'tile_0_2', '3', 'g0_host', 'extra_out0', 'extra_out1')


def test_a_mem_tile_taking_seven_fifos_is_refused():
    plan = plan_of("mlp_4x256", "npu2")
    mem, shim = Tile(0, 1, TileKind.MEM), Tile(0, 0, TileKind.SHIM)
    extra = [Fifo(FifoId("extra", Stem.OUT, (i,)), shim, (mem,), 2, 64) for i in range(1)]
    broken(with_fifos(plan, *extra),
           'ExampleMLP', 'npu2', 'mem_0_1', '7', 'S2MM', 'g1_w0_mem', 'g1_part0', 'g1_part1', 'g1_part2', 'g1_part3')


def test_shared_memory_fifos_take_no_channel():
    plan = plan_of("walk", "npu2")   # g0_out: tile_0_2 -> tile_0_3 in shared memory, beside g0_host
    core, shim = Tile(0, 2, TileKind.COMPUTE), Tile(0, 0, TileKind.SHIM)
    check_plan(with_fifos(plan, Fifo(FifoId("extra", Stem.OUT), core, (shim,), 2, 4)))


def test_a_compute_tile_over_its_16_locks_is_refused():
    plan = plan_of("walk", "npu2")   # tile_0_2 holds g0_host's and g0_out's objects: 2 locks each
    core, above = Tile(0, 2, TileKind.COMPUTE), Tile(0, 3, TileKind.COMPUTE)
    assert tile_locks(plan)[core] == [(G0_IN, 2), (G0_HOST, 2), (G0_OUT, 2)]
    fits = [Fifo(FifoId("extra", Stem.OUT, (i,)), core, (above,), 2, 4, shared_memory=True) for i in range(5)]
    check_plan(with_fifos(plan, *fits))   # 16 locks: no DMA channel, but a lock pair each
    broken(with_fifos(plan, *fits, Fifo(FifoId("extra", Stem.OUT, (5,)), core, (above,), 2, 4, shared_memory=True)),
           'Walk', 'npu2', 'tile_0_2', '18', 'g0_in', 'g0_host', 'g0_out', 'extra_out0', 'extra_out1', 'extra_out2')


def test_a_mem_tile_counts_a_lock_pair_per_part_of_a_split_or_join():
    plan = plan_of("big_matvec", "npu2_1col")   # mem_0_1 splits g0_w_mem into 4 parts and joins 4 into g0_host
    mem = Tile(0, 1, TileKind.MEM)
    assert tile_locks(plan)[mem] == [(FifoId("g0", Stem.W, mem=True), 8), (G0_HOST, 8)]
    # no mem tile of npu1 or npu2 can reach its 64 locks within its 6 + 6 DMA channels: a device with fewer
    few = dataclasses.replace(plan.device, mem=dataclasses.replace(plan.device.mem, locks=15))
    broken(dataclasses.replace(plan, device=few),
           'BigMatVec', 'npu2_1col', 'mem_0_1', '16', 'g0_w_mem', '8', 'g0_host', '15')


def test_a_fifo_is_shared_memory_exactly_when_mlir_aie_makes_it_so():
    plan = plan_of("walk", "npu2")   # g0_out: tile_0_2 -> tile_0_3, neighbours
    by_dma = tuple(dataclasses.replace(f, shared_memory=False) if f.name == G0_OUT else f for f in plan.fifos)
    broken(dataclasses.replace(plan, fifos=by_dma),
           'Walk', 'npu2', 'g0_out', 'tile_0_2', 'tile_0_3')
    broken(with_fifos(plan, g0_out=(Tile(0, 0, TileKind.SHIM),)),
           'Walk', 'npu2', 'g0_out', 'tile_0_2', 'shim_0_0')


def with_g0_steps(plan, *steps, **changes):
    g0 = dataclasses.replace(plan.functions[0], steps=steps, **changes)
    return dataclasses.replace(plan, functions=(g0, *plan.functions[1:]))


def test_a_kernel_call_not_in_its_c_abi_shape_is_refused():
    plan = plan_of("walk", "npu1")
    src, dst = Ptr(G0_IN), Ptr(G0_HOST)
    broken(with_g0_steps(plan, KernelStep.of(Copy, np.int32, (src, Imm(1), Imm(1)))),
           "Walk", "g0", "copy_i32", "(Ptr, Imm i32, Imm i32)", "2 Ptr(s)")
    broken(with_g0_steps(plan, KernelStep.of(Copy, np.int32, (src, dst))),
           "Walk", "g0", "copy_i32", "(Ptr, Ptr)", "2 Ptr(s)")
    broken(with_g0_steps(plan, KernelStep.of(Copy, np.int32, (src, dst, Ptr(G0_IN)))),
           "Walk", "g0", "copy_i32", "(Ptr, Ptr, Ptr)", "2 Ptr(s)")
    broken(with_g0_steps(plan, KernelStep.of(Scale, np.float32, (src, dst, Imm(1), Imm(2)))),
           'Walk', 'npu1', 'g0', 'scale_f32', 'i32')
    broken(with_g0_steps(plan, ScalarStep(Load(G0_IN), WordOp.ADD, Imm(1), Imm(2))),
           'Walk', 'npu1', 'g0', 'ScalarStep', 'i32', 'KernelStep')
    check_plan(with_g0_steps(plan, KernelStep.of(Copy, np.int32, (src, dst, Load(G0_IN)))))


def test_a_block_stride_in_a_function_without_blocks_is_refused():
    plan = with_g0_steps(plan_of("walk", "npu1"), KernelStep.of(Copy, np.int32, (Ptr(G0_IN, 0, 4), Ptr(G0_HOST), Imm(1))))
    broken(plan, 'Walk', 'npu1', 'g0', "'g0_in'", '4')


def with_program(plan, *program):
    return dataclasses.replace(plan, cores=(dataclasses.replace(plan.cores[0], program=program),))


def test_a_release_before_its_acquire_is_refused():
    plan = plan_of("walk", "npu1")
    take_in, take_host, invoke, give_in, give_host = plan.cores[0].program
    broken(with_program(plan, give_in, take_in, take_host, invoke, give_host),
           'Walk', 'npu1', 'tile_0_2', 'g0_in')
    late = (take_in, take_in, Loop(3, (give_in,)), take_in, take_host, invoke, give_host)   # its 3rd iteration
    broken(with_program(plan, *late),
           'Walk', 'npu1', 'tile_0_2', 'g0_in')


def test_an_invoke_on_a_fifo_not_held_is_refused():
    plan = plan_of("walk", "npu1")
    take_in, take_host, invoke, give_in, give_host = plan.cores[0].program
    broken(with_program(plan, take_host, invoke, take_in, give_in, give_host),
           'Walk', 'npu1', 'tile_0_2', 'g0', 'g0_in')


def test_a_fifo_from_a_shim_to_a_shim_or_to_its_own_producer_is_refused():
    plan = plan_of("walk", "npu1")
    shim, core = plan.fifos[0].producer, plan.fifos[0].consumers[0]
    to_shim = dataclasses.replace(plan.fifos[0], consumers=(shim,))
    broken(dataclasses.replace(plan, fifos=(to_shim, *plan.fifos[1:])),
           'Walk', 'npu1', 'g0_in', 'shim_0_0')
    to_self = dataclasses.replace(plan.fifos[1], consumers=(core,))
    broken(dataclasses.replace(plan, fifos=(plan.fifos[0], to_self)),
           'Walk', 'npu1', 'g0_host', 'tile_0_2')


def test_link_parts_not_back_to_back_are_refused():
    """mlir-aie moves part i of a split or join from its offset up to the next part's (the last up
    to the object's end): an offset off a word, a gap or a negative offset would move other bytes."""
    plan = plan_of("big_matvec", "npu2_1col")   # one column's shim channels: one lane, split on its mem tile
    split, join = plan.links
    odd_split = dataclasses.replace(split, destination_offsets=(0, 16384, 32768, 49150))
    broken(dataclasses.replace(plan, links=(odd_split, join)),
           "BigMatVec", "g0_w_mem", "[0, 16384, 32768, 49150]", "65536")
    odd_join = dataclasses.replace(join, source_offsets=(-4, 512, 1024, 1536))
    broken(dataclasses.replace(plan, links=(split, odd_join)),
           "BigMatVec", "g0_host", "[-4, 512, 1024, 1536]", "2048")
    both = dataclasses.replace(join, destinations=(G0_HOST, G0_HOST))
    broken(dataclasses.replace(plan, links=(split, both)),
           'BigMatVec', 'npu2_1col', "'g0_part0'", "'g0_part1'", "'g0_part2'", "'g0_part3'", "'g0_host'")


def test_names_mlir_or_a_glue_file_cannot_take_are_refused():
    """What the printers would otherwise print wrong: names that are no MLIR symbol, a glue file
    `<function>.cc` overwriting a kernel's source."""
    plan = plan_of("add_one", "npu2")
    (f,) = plan.functions
    broken(dataclasses.replace(plan, functions=(dataclasses.replace(f, name="add"),)),
           'AddOne', 'npu2', "'add'")
    broken(dataclasses.replace(plan, functions=(dataclasses.replace(f, name="g0 x"),)),
           'AddOne', 'npu2', "'g0 x'", "'_'", "'$'", "'.'")
    tile = plan.cores[0].tile
    broken(dataclasses.replace(plan, buffers=(Buffer("g0 odd", tile, 8, np.dtype(np.int32)),)),
           'AddOne', 'npu2', "'g0 odd'", "'_'", "'$'", "'.'")


def test_a_buffer_of_part_elements_and_a_dma_of_no_host_buffer_are_refused():
    plan = plan_of("add_one", "npu2")
    broken(dataclasses.replace(plan, buffers=(Buffer("g0_odd", plan.cores[0].tile, 6, np.dtype(np.int32)),)),
           'AddOne', 'npu2', 'g0_odd', 'tile_0_2', '6', 'int32')
    broken(with_op(plan, 0, buffer="weights"),
           'AddOne', 'npu2', 'op 0', 'mm2s', "'weights'", 'g0_in', 'shim_0_0')


def test_a_link_of_fifos_of_other_element_sizes_is_refused():
    """mlir-aie counts a split's or join's offsets in elements of its mem-tile object."""
    plan = plan_of("big_matvec", "npu2_1col")
    fifos = tuple(dataclasses.replace(f, dtype=np.dtype(np.int16)) if str(f.name) == "g0_w0" else f
                  for f in plan.fifos)
    broken(dataclasses.replace(plan, fifos=fifos),
           'BigMatVec', 'npu2_1col', 'g0_w_mem', "'g0_w0'", "'g0_w1'", "'g0_w2'", "'g0_w3'")
