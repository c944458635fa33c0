"""`core_of` (iron/compiler/cores.py): what each core runs. A part's Function calls its kernels by
their C ABI (a Ptr per input and the output, i32 sizes, the attributes), then the copies
exporting results; its parameters are the objects the steps touch, in the order the core binds
them; the core acquires its inputs (consumer) and outputs (producer), invokes, and releases
them. A streamed matrix's leading call is a blocked `<part>_block` Function invoked in a Loop of
one iteration per block, its result pointer striding a block of rows per iteration. A state
written through out= is first copied into the `_host` region (Accumulate adds into it). A view
of a computed result of too many runs is refused here, where the core would gather it."""
import numpy as np
import pytest

from aie_utils import from_name
from iron.compiler.cores import core_of
from iron.compiler.objects import MAX_GATHER_RUNS, pack
from iron.errors import PlacementError
from iron.kernels import Accumulate, Add, Copy, MatVec, SiLU
from iron.plan.fifos import FifoId, Stem
from iron.plan.plan import (
    Acquire,
    Imm,
    Invoke,
    KernelStep,
    Loop,
    Port,
    Ptr,
    Release,
    Tile,
    TileKind,
)
from tests.compiler import designs
from tests.compiler.passes import context
from tests.compiler.test_objects import Columns

NPU2 = from_name("npu2")
I32, F32 = np.dtype(np.int32), np.dtype(np.float32)
C, P = Port.CONSUME, Port.PRODUCE


def cores_of(program, device=NPU2) -> list[tuple]:
    """(Functions, Core) of every part, group by group."""
    ctx = context(program, device)
    return [core_of(ctx, part) for site in ctx.layout.sites for part in pack(ctx, site)]


def around(ins, outs, *middle) -> tuple:
    """A core program acquiring `ins` and `outs`, running `middle`, releasing them."""
    return (*(Acquire(f, C) for f in ins), *(Acquire(f, P) for f in outs), *middle,
            *(Release(f, C) for f in ins), *(Release(f, P) for f in outs))


def test_add_one_invokes_one_function_calling_add_by_its_c_abi():
    [([function], core)] = cores_of(designs.trace(designs.add_one(1024)))
    assert (core.tile, core.group) == (Tile(0, 2, TileKind.COMPUTE), "g0")
    assert core.program == around([FifoId("g0", Stem.IN)], [FifoId("g0", Stem.HOST)], Invoke("g0", (FifoId("g0", Stem.IN), FifoId("g0", Stem.HOST))))
    assert (function.name, function.params, function.blocked) == ("g0", (FifoId("g0", Stem.IN), FifoId("g0", Stem.HOST)), False)
    assert function.steps == (KernelStep.of(Add, I32, (Ptr(FifoId("g0", Stem.IN), 0), Ptr(FifoId("g0", Stem.IN), 4096), Ptr(FifoId("g0", Stem.HOST), 0),
                                                       Imm(1024))),)


def test_a_split_matvec_loops_over_its_blocks_in_a_blocked_function():
    """512 x 256 float32 over 4 cores, 8 blocks of 16 rows each: each core's Loop acquires a block
    of its `_w<p>`, invokes `g0_p<p>_block`, whose result pointer strides 16 rows (64 bytes); on
    npu1, whose grid reads the matrix through no more shim channels than the split, so the split is taken."""
    made = cores_of(designs.trace(designs.big_matvec(512, 256)), from_name("npu1"))
    assert len(made) == 4
    for p, ([block], core) in enumerate(made):
        w, part = FifoId("g0", Stem.W, (p,)), FifoId("g0", Stem.PART, (p,))
        params = (FifoId("g0", Stem.IN), part, w)
        assert core.program == around([FifoId("g0", Stem.IN)], [part], Loop(8, (Acquire(w, C), Invoke(f"g0_p{p}_block", params),
                                                                  Release(w, C))))
        assert (block.name, block.params, block.blocked) == (f"g0_p{p}_block", params, True)
        assert block.steps == (KernelStep.of(MatVec, F32, (Ptr(w, 0), Ptr(FifoId("g0", Stem.IN), 0), Ptr(part, 0, block_stride=64),
                                                           Imm(16), Imm(256))),)


def test_a_group_reading_another_acquires_its_out_and_binds_its_buffers():
    """The MLP layer's g1 reads g0_out (x at byte 0, the normed vector at 256) and keeps MatVec#1
    and SiLU#2 in its Buffers; g0 copies x into its `_out` after RMSNorm."""
    (g0_functions, g0), (g1_functions, g1) = cores_of(designs.trace(designs.mlp_layer(64)))
    assert g0.program == around([FifoId("g0", Stem.IN)], [FifoId("g0", Stem.OUT)], Invoke("g0", (FifoId("g0", Stem.IN), FifoId("g0", Stem.OUT))))
    params = (FifoId("g1", Stem.IN), FifoId("g0", Stem.OUT), FifoId("g1", Stem.HOST), "g1_buf0", "g1_buf1")
    assert g1.program == around([FifoId("g1", Stem.IN), FifoId("g0", Stem.OUT)], [FifoId("g1", Stem.HOST)], Invoke("g1", params))
    [function] = g1_functions
    assert function.params == params
    assert [(s.kernel, s.args[:s.kernel.arity + 1]) for s in function.steps] == [
        (MatVec, (Ptr(FifoId("g1", Stem.IN), 0), Ptr(FifoId("g0", Stem.OUT), 256), Ptr("g1_buf0", 0))),
        (SiLU, (Ptr("g1_buf0", 0), Ptr("g1_buf1", 0))),
        (Add, (Ptr(FifoId("g0", Stem.OUT), 0), Ptr("g1_buf1", 0), Ptr(FifoId("g1", Stem.HOST), 0)))]
    assert [s.kernel for s in g0_functions[0].steps][1:] == [Copy]


def test_an_accumulate_into_a_state_row_copies_the_row_then_adds_into_it():
    [([function], core)] = cores_of(designs.trace(designs.accumulate_at(64, 4)))
    assert function.steps == (
        KernelStep.of(Copy, I32, (Ptr(FifoId("g0", Stem.IN), 256), Ptr(FifoId("g0", Stem.HOST), 0), Imm(64))),
        KernelStep.of(Accumulate, I32, (Ptr(FifoId("g0", Stem.IN), 0), Ptr(FifoId("g0", Stem.HOST), 0), Imm(64))))


def test_a_core_reading_a_view_of_too_many_runs_is_refused_with_its_names():
    rows = MAX_GATHER_RUNS + 1
    with pytest.raises(PlacementError) as err:
        cores_of(Columns(1).trace(x=((rows, 2), F32), y=((rows, 1), F32)))
    assert all(name in str(err.value) for name in ("Exp(x)[:, :1]", "Exp#0"))
