"""describe(plan) (iron/plan/describe.py): Walk's summary on npu2, pinned (its DDR traffic:
successor[node] and this call's 5 words read, the 2 outputs and the next 7 words written), and
the rules of a split MLP in its summary."""

from aie_utils import from_name
from iron.compiler.compile import compile_program
from iron.plan.describe import describe, word_text
from iron.plan.plan import Const, WordDef, WordKind, WordOp, WordRef
from tests.compiler import designs

WALK_NPU2 = """\
Walk on npu2: full ELF (image 'elf')
tiles:
  tile_0_2  g0    Copy#0, Copy#1
  tile_0_3  emit  computes the next call's words
  shim_0_0  shim
memory (used / budget bytes):
  tile_0_2  1056 / 65536  g0_in@tile_0_2 8, g0_host@tile_0_2 16, g0_out 8, stack@tile_0_2 1024
  tile_0_3  1144 / 65536  emit_in@tile_0_3 56, feedback@tile_0_3 64, stack@tile_0_3 1024
fifos:
  g0_in     shim_0_0 -> tile_0_2  depth 2  4 bytes   DMA            successor[node]
  g0_host   tile_0_2 -> shim_0_0  depth 2  8 bytes   DMA            carry.node, trail[steps]
  g0_out    tile_0_2 -> tile_0_3  depth 2  4 bytes   shared memory  Copy#0
  emit_in   shim_0_0 -> tile_0_3  depth 2  28 bytes  DMA            this call's words
  feedback  tile_0_3 -> shim_0_0  depth 2  32 bytes  DMA            the next call's words
links:
  none
words:
  w0  node       carried  given per call
  w1  steps      carried  given per call
  w2  node       dma      = w0            in [0, 8) for successor[node]
  w3  steps      dma      = w1            in [0, 9) for trail[steps]
  w4  steps      dma      = w3            9 in a flagged run (the states' sink)
  w5  steps + 1  next     = w1 + 1
groups:
  g0: Copy#0, Copy#1 (closed by end of body)
rules:
  snake_order: g0 on tile_0_2
  snake_order: emit on tile_0_3
  shim_channels: shim_0_0: g0_in (mm2s), g0_host (s2mm), emit_in (mm2s), feedback (s2mm)
DDR per call:
  reads 32 bytes (4 of weights and params), writes 40 bytes
emit:
  on tile_0_3, writing 6 words through feedback, bounded ones clamped into range, and in word 6 how many were not
  next node <- element of g0_out at byte 0
  next steps <- w5 (steps + 1)
next carried values (host):
  node <- output carry.node
  steps <- w5 (steps + 1)
"""


def test_walk_on_npu2_is_described_exactly():
    plan = compile_program(designs.trace(designs.walk(8)), from_name("npu2"))
    assert describe(plan) == WALK_NPU2


def test_a_description_is_deterministic():
    first = describe(compile_program(designs.trace(designs.mlp(2, 256)), from_name("npu1")))
    second = describe(compile_program(designs.trace(designs.mlp(2, 256)), from_name("npu1")))
    assert first == second
    assert "  mem_1_1: split g3_w_mem -> g3_w0, g3_w1, g3_w2, g3_w3 at bytes 0, 16384, 32768, 49152\n" in first
    assert "  split_matrix_over_tiles: g1: layers.0.w (256, 256) float32 (262144 bytes) split by rows over 4 tiles\n" in first
    assert "  g1: MatVec#1, SiLU#2, Add#3 (closed by matrix_op_starts_group)\n" in first


def test_word_text_shows_how_each_word_is_computed():
    assert [word_text(w) for w in (
        WordDef(0, "pos", WordKind.SCRATCHPAD),
        WordDef(1, "pos * 64", WordKind.DMA, WordOp.MUL, WordRef(0), Const(64)),
        WordDef(2, "min(pos, 3)", WordKind.CORE, WordOp.MIN, WordRef(0), Const(3)),
        WordDef(3, "pos", WordKind.DMA, WordOp.COPY, WordRef(0)),
    )] == ["given per call", "= w0 * 64", "= min(w0, 3)", "= w0"]
