"""Tests of iron.plan.mlir.print_mlir: exact text for what the goldens do not show (a streamed
block loop with a buffer, split and join links, patched DMAs with tokens), only allowed ops in
every test design, determinism, and the goldens of add-one, Walk and an Accumulate at a
Scratchpad position on npu2 and Walk on npu1: MLIR plus glue sources, regenerated from
compile_program (tests/compiler/designs.py) and compared byte for byte; IRON_UPDATE_GOLDEN=1
rewrites them.

The hand-built Plans and `design_plans()` are also used by test_sources.py."""

import dataclasses
import functools
import os
import re
from pathlib import Path

import numpy as np
import pytest

import aie_utils
from iron import dtypes
from iron.compiler.compile import compile_program
from iron.errors import PlanError
from iron.kernels import Accumulate, Add, Copy, MatVec
from iron.plan.mlir import ALLOWED_OPS, print_mlir
from iron.plan.plan import (
    Acquire,
    Buffer,
    Const,
    Core,
    Direction,
    Dma,
    Emit,
    Fifo,
    Function,
    HostBuffer,
    HostRole,
    Imm,
    Invoke,
    KernelStep,
    Link,
    Load,
    Loop,
    Placement,
    PlacementKind,
    Plan,
    Port,
    Ptr,
    Release,
    ScalarStep,
    Tile,
    TileKind,
    Wait,
    WordDef,
    WordKind,
    WordOp,
    WordRef,
)
from iron.plan.sources import kernel_sources
from tests.compiler import designs
from tests.quotes import quoted

GOLDEN = Path(__file__).parent / "golden"
F32 = np.dtype(np.float32)
I32 = np.dtype(np.int32)
SHIM, MEM, CORE, CORE2 = Tile(0, 0, TileKind.SHIM), Tile(0, 1, TileKind.MEM), Tile(0, 2, TileKind.COMPUTE), Tile(0, 3, TileKind.COMPUTE)


# ---- hand-built Plans ---------------------------------------------------------------------------

def dma(direction, fifo, buffer, offset, n, bd_id, patch_word=None, issue_token=False):
    """A contiguous transfer of n words."""
    return Dma(direction, fifo, buffer, offset, (1, 1, 1, n), (0, 0, 0, 1), bd_id, SHIM, patch_word, issue_token)


def plan(device, name, **parts) -> Plan:
    device = aie_utils.from_name(device)
    empty = dict(placements=(), links=(), buffers=(), words=(), emit=None)
    return Plan(device=device, name=name, full_elf=device.full_elf,
                image="elf" if device.full_elf else "xclbin", **{**empty, **parts})


def hold(*fifos, invoke):
    """Acquire each (fifo, port), invoke, release them: one launch of a simple core."""
    return (*(Acquire(f, p) for f, p in fifos), invoke, *(Release(f, p) for f, p in fifos))


def add_one_plan() -> Plan:
    """out = x + ones over 1024 int32 on npu2: one core, one packed input object."""
    return plan(
        "npu2", "AddOne",
        tiles=(SHIM, CORE),
        host_buffers=(HostBuffer("consts", HostRole.CONSTS, 1024), HostBuffer("inputs", HostRole.INPUTS, 1024),
                      HostBuffer("outputs", HostRole.OUTPUTS, 1024), HostBuffer("words", HostRole.WORDS, 1)),
        placements=(Placement("ones", PlacementKind.WEIGHT, "consts", 0, (1024,), I32),
                    Placement("x", PlacementKind.INPUT, "inputs", 0, (1024,), I32),
                    Placement("out0", PlacementKind.OUTPUT, "outputs", 0, (1024,), I32)),
        fifos=(Fifo("g0_in", SHIM, (CORE,), 2, 8192), Fifo("g0_host", CORE, (SHIM,), 2, 4096)),
        functions=(Function("g0", ("g0_in", "g0_host"), (
            KernelStep.of(Add, np.int32, (Ptr("g0_in", 4096), Ptr("g0_in"), Ptr("g0_host"), Imm(1024))),)),),
        cores=(Core(CORE, "g0", hold(("g0_in", Port.CONSUME), ("g0_host", Port.PRODUCE),
                                     invoke=Invoke("g0", ("g0_in", "g0_host")))),),
        sequence=(dma(Direction.MM2S, "g0_in", "consts", 0, 1024, 0), dma(Direction.MM2S, "g0_in", "inputs", 0, 1024, 1),
                  dma(Direction.S2MM, "g0_host", "outputs", 0, 1024, 2), Wait("g0_host")),
    )


def walk_plan(device: str) -> Plan:
    """Walk: node = successor[node]; trail[steps] = node; steps += 1. On a full-ELF device an
    emit core computes the next call's words into `feedback`."""
    emit = aie_utils.from_name(device).full_elf
    words = (WordDef(0, "node", WordKind.CARRIED, bound=(0, 8), what="successor[node]", tensor="successor"),
             WordDef(1, "steps", WordKind.CARRIED, bound=(0, 9), what="trail[steps]", tensor="trail"),
             WordDef(2, "steps + 1", WordKind.CORE, WordOp.ADD, WordRef(1), Const(1)))
    host_buffers = (HostBuffer("consts", HostRole.CONSTS, 8), HostBuffer("states", HostRole.STATES, 9),
                    HostBuffer("inputs", HostRole.INPUTS, 1), HostBuffer("outputs", HostRole.OUTPUTS, 1),
                    HostBuffer("words", HostRole.WORDS, 3))
    g0_steps = (KernelStep.of(Copy, np.int32, (Ptr("g0_in"), Ptr("g0_host"), Imm(1))),
                KernelStep.of(Copy, np.int32, (Ptr("g0_host"), Ptr("g0_host", 4), Imm(1))))
    g0_fifos = (("g0_in", Port.CONSUME), ("g0_host", Port.PRODUCE))
    sequence = (dma(Direction.MM2S, "g0_in", "consts", 0, 1, 0, patch_word=0),
                dma(Direction.S2MM, "g0_host", "outputs", 0, 1, 1),
                dma(Direction.S2MM, "g0_host", "states", 0, 1, 2, patch_word=1), Wait("g0_host"))
    parts = dict(
        tiles=(SHIM, CORE), host_buffers=host_buffers, words=words[:2],
        placements=(Placement("successor", PlacementKind.WEIGHT, "consts", 0, (8,), I32),
                    Placement("trail", PlacementKind.STATE, "states", 0, (9,), I32),
                    Placement("carry.node", PlacementKind.CARRY, "outputs", 0, (), I32)),
        fifos=(Fifo("g0_in", SHIM, (CORE,), 2, 4), Fifo("g0_host", CORE, (SHIM,), 2, 8)),
        functions=(Function("g0", ("g0_in", "g0_host"), g0_steps),),
        cores=(Core(CORE, "g0", hold(*g0_fifos, invoke=Invoke("g0", ("g0_in", "g0_host")))),),
        sequence=sequence,
    )
    if emit:
        parts.update(_walk_emit(parts, words, host_buffers, g0_steps, g0_fifos, sequence))
    return plan(device, "Walk", **parts)


def _walk_emit(parts, words, host_buffers, g0_steps, g0_fifos, sequence) -> dict:
    """The full-ELF additions to Walk: g0 also sends the new node to the emit core on tile (0, 3)."""
    g0_params = ("g0_in", "g0_out", "g0_host")
    emit_steps = (ScalarStep(Ptr("feedback"), WordOp.COPY, Load("g0_out")),
                  ScalarStep(Ptr("feedback", 4), WordOp.COPY, Load("emit_in", 8)),
                  ScalarStep(Ptr("feedback", 8), WordOp.ADD, Load("feedback", 4), Imm(1)))
    emit_fifos = (("emit_in", Port.CONSUME), ("g0_out", Port.CONSUME), ("feedback", Port.PRODUCE))
    return dict(
        tiles=(SHIM, CORE, CORE2), words=words,
        host_buffers=(*host_buffers, HostBuffer("feedback", HostRole.FEEDBACK, 3)),
        fifos=(*parts["fifos"], Fifo("g0_out", CORE, (CORE2,), 2, 4, shared_memory=True),
               Fifo("emit_in", SHIM, (CORE2,), 2, 12), Fifo("feedback", CORE2, (SHIM,), 2, 12)),
        functions=(Function("g0", g0_params, (*g0_steps, KernelStep.of(Copy, np.int32, (Ptr("g0_host"), Ptr("g0_out"), Imm(1))))),
                   Function("emit", ("emit_in", "g0_out", "feedback"), emit_steps)),
        cores=(Core(CORE, "g0", hold(g0_fifos[0], ("g0_out", Port.PRODUCE), g0_fifos[1], invoke=Invoke("g0", g0_params))),
               Core(CORE2, "emit", hold(*emit_fifos, invoke=Invoke("emit", tuple(f for f, _ in emit_fifos))))),
        sequence=(sequence[0], dma(Direction.MM2S, "emit_in", "words", 0, 3, 3), *sequence[1:3],
                  dma(Direction.S2MM, "feedback", "feedback", 0, 3, 4), Wait("g0_host"), Wait("feedback")),
        emit=Emit(CORE2, (("node", Load("g0_out", 0)), ("steps", WordRef(2))), words),
    )


def accumulate_plan() -> Plan:
    """acc[pos] += x for a per-call Scratchpad position pos, acc (8, 4) float32, on npu2."""
    return plan(
        "npu2", "Accumulate",
        tiles=(SHIM, CORE),
        host_buffers=(HostBuffer("consts", HostRole.CONSTS, 1), HostBuffer("states", HostRole.STATES, 32),
                      HostBuffer("inputs", HostRole.INPUTS, 4), HostBuffer("outputs", HostRole.OUTPUTS, 1),
                      HostBuffer("words", HostRole.WORDS, 2)),
        placements=(Placement("acc", PlacementKind.STATE, "states", 0, (8, 4), F32),
                    Placement("x", PlacementKind.INPUT, "inputs", 0, (4,), F32)),
        words=(WordDef(0, "pos", WordKind.SCRATCHPAD, bound=(0, 8), what="acc[pos]", tensor="acc"),
               WordDef(1, "acc[pos] offset", WordKind.DMA, WordOp.MUL, WordRef(0), Const(4))),
        fifos=(Fifo("g0_in", SHIM, (CORE,), 2, 32, F32), Fifo("g0_host", CORE, (SHIM,), 2, 16, F32)),
        functions=(Function("g0", ("g0_in", "g0_host"), (
            KernelStep.of(Copy, np.float32, (Ptr("g0_in", 16), Ptr("g0_host"), Imm(4))),
            KernelStep.of(Accumulate, np.float32, (Ptr("g0_in"), Ptr("g0_host"), Imm(4))))),),
        cores=(Core(CORE, "g0", hold(("g0_in", Port.CONSUME), ("g0_host", Port.PRODUCE),
                                     invoke=Invoke("g0", ("g0_in", "g0_host")))),),
        sequence=(dma(Direction.MM2S, "g0_in", "inputs", 0, 4, 0), dma(Direction.MM2S, "g0_in", "states", 0, 4, 1, patch_word=1),
                  dma(Direction.S2MM, "g0_host", "states", 0, 4, 2, patch_word=1), Wait("g0_host")),
    )


def streamed_plan() -> Plan:
    """out = W @ x with W (64, 16) f32 streamed in 4 blocks of 16 rows through the mem tile; x is
    kept in a Buffer; g0_block runs once per block."""
    return plan(
        "npu2", "Streamed",
        tiles=(CORE, MEM, SHIM),
        host_buffers=(HostBuffer("consts", HostRole.CONSTS, 1024), HostBuffer("inputs", HostRole.INPUTS, 16),
                      HostBuffer("outputs", HostRole.OUTPUTS, 64), HostBuffer("words", HostRole.WORDS, 1)),
        fifos=(Fifo("g0_in", SHIM, (CORE,), 2, 64, F32), Fifo("g0_w_mem", SHIM, (MEM,), 2, 1024, F32),
               Fifo("g0_w", MEM, (CORE,), 2, 1024, F32), Fifo("g0_host", CORE, (SHIM,), 1, 256, F32)),
        links=(Link(MEM, ("g0_w_mem",), ("g0_w",)),),
        buffers=(Buffer("g0_x", CORE, 64, F32),),
        functions=(Function("g0", ("g0_in", "g0_x"), (KernelStep.of(Copy, np.float32, (Ptr("g0_in"), Ptr("g0_x"), Imm(16))),)),
                   Function("g0_block", ("g0_w", "g0_x", "g0_host"), (
                       KernelStep.of(MatVec, np.float32, (Ptr("g0_w"), Ptr("g0_x"), Ptr("g0_host", 0, 64), Imm(16), Imm(16))),),
                       blocked=True)),
        cores=(Core(CORE, "g0", (
            *hold(("g0_in", Port.CONSUME), invoke=Invoke("g0", ("g0_in", "g0_x"))),
            Acquire("g0_host", Port.PRODUCE),
            Loop(4, hold(("g0_w", Port.CONSUME), invoke=Invoke("g0_block", ("g0_w", "g0_x", "g0_host")))),
            Release("g0_host", Port.PRODUCE)), stack_bytes=2048),),
        sequence=(dma(Direction.MM2S, "g0_in", "inputs", 0, 16, 0),
                  Dma(Direction.MM2S, "g0_w_mem", "consts", 0, (1, 1, 4, 256), (0, 0, 256, 1), 1, SHIM),
                  dma(Direction.S2MM, "g0_host", "outputs", 0, 64, 2), Wait("g0_host")),
    )


HAND_BUILT = {
    "add_one_npu2": add_one_plan,
    "walk_npu2": lambda: walk_plan("npu2"),
    "accumulate_npu2": accumulate_plan,
    "walk_npu1": lambda: walk_plan("npu1"),
}


# ---- exact text ---------------------------------------------------------------------------------

STREAMED_DEVICE = """\
    %shim_0_0 = aie.tile(0, 0)
    %mem_0_1 = aie.tile(0, 1)
    %tile_0_2 = aie.tile(0, 2)
    aie.objectfifo @g0_in(%shim_0_0, {%tile_0_2}, 2 : i32) : !aie.objectfifo<memref<16xf32>>
    aie.objectfifo @g0_w_mem(%shim_0_0, {%mem_0_1}, 2 : i32) : !aie.objectfifo<memref<256xf32>>
    aie.objectfifo @g0_w(%mem_0_1, {%tile_0_2}, 2 : i32) : !aie.objectfifo<memref<256xf32>>
    aie.objectfifo @g0_host(%tile_0_2, {%shim_0_0}, 1 : i32) : !aie.objectfifo<memref<64xf32>>
    aie.objectfifo.link [@g0_w_mem] -> [@g0_w] ([] [])
    %g0_x = aie.buffer(%tile_0_2) {sym_name = "g0_x"} : memref<16xf32>
    func.func private @g0(memref<16xf32>, memref<16xf32>) attributes {link_with = "g0.o"}
    func.func private @g0_block(memref<256xf32>, memref<16xf32>, memref<64xf32>, i32) attributes {link_with = "g0_block.o"}
"""

STREAMED_CORE = """\
    %core_0_2 = aie.core(%tile_0_2) {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c4 = arith.constant 4 : index
      %cmax = arith.constant 9223372036854775807 : index
      scf.for %launch = %c0 to %cmax step %c1 {
        %g0_in_view0 = aie.objectfifo.acquire @g0_in(Consume, 1) : !aie.objectfifosubview<memref<16xf32>>
        %g0_in_obj0 = aie.objectfifo.subview.access %g0_in_view0[0] : !aie.objectfifosubview<memref<16xf32>> -> memref<16xf32>
        func.call @g0(%g0_in_obj0, %g0_x) : (memref<16xf32>, memref<16xf32>) -> ()
        aie.objectfifo.release @g0_in(Consume, 1)
        %g0_host_view0 = aie.objectfifo.acquire @g0_host(Produce, 1) : !aie.objectfifosubview<memref<64xf32>>
        %g0_host_obj0 = aie.objectfifo.subview.access %g0_host_view0[0] : !aie.objectfifosubview<memref<64xf32>> -> memref<64xf32>
        scf.for %block0 = %c0 to %c4 step %c1 {
          %block0_i32 = arith.index_cast %block0 : index to i32
          %g0_w_view0 = aie.objectfifo.acquire @g0_w(Consume, 1) : !aie.objectfifosubview<memref<256xf32>>
          %g0_w_obj0 = aie.objectfifo.subview.access %g0_w_view0[0] : !aie.objectfifosubview<memref<256xf32>> -> memref<256xf32>
          func.call @g0_block(%g0_w_obj0, %g0_x, %g0_host_obj0, %block0_i32) : (memref<256xf32>, memref<16xf32>, memref<64xf32>, i32) -> ()
          aie.objectfifo.release @g0_w(Consume, 1)
        }
        aie.objectfifo.release @g0_host(Produce, 1)
      }
      aie.end
    } {stack_size = 2048 : i32}
"""


def test_streamed_blocks_print_link_buffer_loop_and_block_index():
    text = print_mlir(streamed_plan())
    assert STREAMED_DEVICE + STREAMED_CORE in text
    assert ("aiex.npu.dma_memcpy_nd(%arg0[0, 0, 0, 0][1, 1, 4, 256][0, 0, 256, 1]) "
            "{id = 1 : i64, metadata = @g0_w_mem} : memref<1024xi32>") in text


def test_split_and_join_offsets_are_in_elements_of_the_mem_tile_object():
    base = streamed_plan()
    fifos = (Fifo("rows", SHIM, (MEM,), 2, 512, np.dtype(np.int16)),
             Fifo("top", MEM, (CORE,), 2, 128, np.dtype(np.int16)),
             Fifo("bottom", MEM, (CORE2,), 2, 384, np.dtype(np.int16)),
             Fifo("part0", CORE, (MEM,), 2, 64), Fifo("part1", CORE2, (MEM,), 2, 64),
             Fifo("joined", MEM, (SHIM,), 2, 128))
    links = (Link(MEM, ("rows",), ("top", "bottom"), destination_offsets=(0, 128)),
             Link(MEM, ("part0", "part1"), ("joined",), source_offsets=(0, 64)))
    parts = dict(tiles=(SHIM, MEM, CORE, CORE2), fifos=fifos, links=links, cores=(), functions=(), buffers=(), sequence=())
    text = print_mlir(dataclasses.replace(base, **parts))
    assert "aie.objectfifo.link [@rows] -> [@top, @bottom] ([] [0, 64])\n" in text
    assert "aie.objectfifo.link [@part0, @part1] -> [@joined] ([0, 16] [])\n" in text
    assert "aie.objectfifo @top(%mem_0_1, {%tile_0_2}, 2 : i32) : !aie.objectfifo<memref<64xi16>>\n" in text


def test_patched_dmas_carry_a_comment_and_tokens_print():
    walk = walk_plan("npu2")
    sequence = (walk.sequence[0], dataclasses.replace(walk.sequence[1], issue_token=True), *walk.sequence[2:])
    lines = print_mlir(dataclasses.replace(walk, sequence=sequence)).splitlines()
    start = lines.index("    aie.runtime_sequence @sequence(%arg0: memref<8xi32>, %arg1: memref<9xi32>, "
                        "%arg2: memref<1xi32>, %arg3: memref<1xi32>, %arg4: memref<3xi32>, %arg5: memref<3xi32>) {")
    assert lines[start + 1:start + 11] == [
        "      // iron.patch dma=0 word=0",
        "      aiex.npu.dma_memcpy_nd(%arg0[0, 0, 0, 0][1, 1, 1, 1][0, 0, 0, 1]) {id = 0 : i64, metadata = @g0_in} : memref<8xi32>",
        "      aiex.npu.dma_memcpy_nd(%arg4[0, 0, 0, 0][1, 1, 1, 3][0, 0, 0, 1]) {id = 3 : i64, metadata = @emit_in, issue_token = true} : memref<3xi32>",
        "      aiex.npu.dma_memcpy_nd(%arg3[0, 0, 0, 0][1, 1, 1, 1][0, 0, 0, 1]) {id = 1 : i64, metadata = @g0_host} : memref<1xi32>",
        "      // iron.patch dma=3 word=1",
        "      aiex.npu.dma_memcpy_nd(%arg1[0, 0, 0, 0][1, 1, 1, 1][0, 0, 0, 1]) {id = 2 : i64, metadata = @g0_host} : memref<9xi32>",
        "      aiex.npu.dma_memcpy_nd(%arg5[0, 0, 0, 0][1, 1, 1, 3][0, 0, 0, 1]) {id = 4 : i64, metadata = @feedback} : memref<3xi32>",
        "      aiex.npu.dma_wait {symbol = @g0_host}",
        "      aiex.npu.dma_wait {symbol = @feedback}",
        "    }",
    ]


def test_static_offset_goes_in_the_innermost_offset():
    base = add_one_plan()
    moved = dataclasses.replace(base.sequence[1], offset=96, sizes=(2, 1, 3, 8), strides=(128, 0, 16, 1))
    text = print_mlir(dataclasses.replace(base, sequence=(moved,)))
    assert "aiex.npu.dma_memcpy_nd(%arg1[0, 0, 0, 96][2, 1, 3, 8][128, 0, 16, 1]) {id = 1 : i64, metadata = @g0_in}" in text


def test_a_function_parameter_naming_no_object_is_refused():
    """MLIR declares a Function with the memref of the object each parameter names; check_plan
    allows parameters names of their own (the emulator binds objects by position)."""
    base = add_one_plan()
    renamed = (dataclasses.replace(base.functions[0], params=("x", "g0_host")),)
    with pytest.raises(PlanError) as err:
        print_mlir(dataclasses.replace(base, functions=renamed))
    quoted(err.value, "'g0'", "['x']", "FIFO or Buffer")


# ---- every design: allowed ops only, deterministic, goldens ---------------------------------------

OP_LINE = re.compile(r"\s*(?:%[\w$.]+ = )?([a-z]+(?:\.[a-z_]+)+)\b")
STRUCTURE_LINE = re.compile(r"\s*(module \{|\}|\} \{stack_size = \d+ : i32\}|// iron\.patch dma=\d+ word=\d+)")


def op_names(text: str) -> list[str]:
    """The op name of every line; a line that is neither an op nor structure fails the test."""
    names = []
    for line in text.splitlines():
        op = OP_LINE.match(line)
        assert op or STRUCTURE_LINE.fullmatch(line), f"unrecognised line: {line!r}"
        names += [op.group(1)] if op else []
    return names


GOLDEN_DESIGNS = ("add_one_npu2", "walk_npu2", "accumulate_npu2", "walk_npu1")
TRACED = {   # design name -> (graph, device); the first four have goldens
    "add_one_npu2": (designs.add_one, "npu2"),
    "walk_npu2": (designs.walk, "npu2"),
    "accumulate_npu2": (designs.accumulate_at, "npu2"),
    "walk_npu1": (designs.walk, "npu1"),
    "mlp_layer_f32_npu2": (designs.mlp_layer, "npu2"),
    "mlp_layer_bf16_npu2": (lambda: designs.mlp_layer(dtype=dtypes.bfloat16), "npu2"),
    "big_matvec_npu2": (designs.big_matvec, "npu2"),
    "mlp_npu2": (designs.mlp, "npu2"),
}


@functools.cache
def design_plans() -> dict[str, Plan]:
    """Every test design's compiled Plan, plus the hand-built streamed Plan."""
    plans = {name: compile_program(designs.trace(design()), aie_utils.from_name(device))
             for name, (design, device) in TRACED.items()}
    return plans | {"streamed_npu2": streamed_plan()}


def test_every_printed_op_is_allowed():
    for name, plan in design_plans().items():
        names = op_names(print_mlir(plan))
        assert set(names) <= ALLOWED_OPS, (name, sorted(set(names) - ALLOWED_OPS))
        assert {"aie.device", "aie.tile", "aie.objectfifo", "aie.core", "func.func", "func.call",
                "aie.runtime_sequence", "aiex.npu.dma_memcpy_nd", "aiex.npu.dma_wait"} <= set(names), name


def test_printing_is_deterministic():
    assert print_mlir(walk_plan("npu2")) == print_mlir(walk_plan("npu2"))


def golden_files(name: str, plan: Plan) -> dict[str, str]:
    """What a golden holds: the MLIR and the glue file of every Function."""
    sources = kernel_sources(plan)
    files = {f"{name}.mlir": print_mlir(plan)}
    files.update({f"{name}.{f.name}.cc": sources[f"{f.name}.cc"] for f in plan.functions})
    return files


@pytest.mark.parametrize("name", GOLDEN_DESIGNS)
def test_goldens(name):
    files = golden_files(name, design_plans()[name])
    if os.environ.get("IRON_UPDATE_GOLDEN") == "1":
        GOLDEN.mkdir(exist_ok=True)
        for file, text in files.items():
            (GOLDEN / file).write_text(text)
    for file, text in files.items():
        assert (GOLDEN / file).read_text() == text, f"{file} differs; IRON_UPDATE_GOLDEN=1 rewrites it"
