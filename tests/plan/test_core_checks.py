"""The device rules of what runs on cores (iron/plan/core_checks.py), run by `check_plan`: each
Plan the compiler makes keeps them, and each way of breaking one is a PlanError naming the plan,
its device and what breaks it (the function, the tile, the FIFO or object), never a half-checked
Plan. The Plans broken here are add-one's (one core on tile_0_2 invoking `g0` on g0_in and
g0_host) and the split MatVec's (a blocked Function in a Loop of 8)."""
from dataclasses import replace

import pytest

from aie_utils import from_name
from iron.compiler.compile import compile_program
from iron.errors import PlanError
from iron.plan.core_checks import check_cores, check_functions
from iron.plan.fifos import FifoId, Stem
from iron.plan.plan import (
    Acquire,
    Imm,
    Invoke,
    Load,
    Loop,
    Port,
    Ptr,
    Release,
    ScalarStep,
    Tile,
    TileKind,
    WordOp,
)
from tests.compiler import designs

NPU2 = from_name("npu2")
C, P = Port.CONSUME, Port.PRODUCE


@pytest.fixture(scope="module")
def add_one():
    return compile_program(designs.trace(designs.add_one(1024)), NPU2)


def refused(plan, *names):
    """Both checks on `plan`: the PlanError, which names the plan, its device and each of `names`."""
    with pytest.raises(PlanError) as err:
        check_functions(plan)
        check_cores(plan)
    text = str(err.value)
    assert all(name in text for name in ("plan AddOne on npu2", *names)), text
    return text


def with_function(plan, **changes):
    (f,) = plan.functions
    return replace(plan, functions=(replace(f, **changes),))


def with_program(plan, *program, tile=None):
    (core,) = plan.cores
    return replace(plan, cores=(replace(core, program=tuple(program), tile=tile or core.tile),))


def test_the_compilers_plans_keep_the_core_rules(add_one):
    for plan in (add_one, compile_program(designs.trace(designs.big_matvec()), NPU2),
                 compile_program(designs.trace(designs.walk(8)), NPU2)):
        check_functions(plan)
        check_cores(plan)


def test_a_function_reading_an_object_not_among_its_parameters_is_refused(add_one):
    (step,) = add_one.functions[0].steps
    refused(with_function(add_one, params=(FifoId("g0", Stem.IN),)), "function g0", "'g0_host'")
    assert step.args[2] == Ptr(FifoId("g0", Stem.HOST), 0)


def test_repeated_function_names_are_refused(add_one):
    refused(replace(add_one, functions=add_one.functions * 2), "function names repeat", "['g0']")


def test_a_scalar_step_of_an_unknown_op_is_refused(add_one):
    step = ScalarStep(Ptr(FifoId("g0", Stem.HOST), 0), "pow", Imm(2), Imm(3))
    refused(with_function(add_one, steps=(step,)), "function g0", "'pow'")


def test_a_kernel_call_outside_its_c_abi_is_refused(add_one):
    (step,) = add_one.functions[0].steps
    refused(with_function(add_one, steps=(replace(step, args=step.args[:3]),)), "function g0", step.symbol)


def test_a_pointer_past_its_object_is_refused(add_one):
    (step,) = add_one.functions[0].steps
    shifted = replace(step, args=(step.args[0], Ptr(FifoId("g0", Stem.IN), 4100), *step.args[2:]))
    refused(with_function(add_one, steps=(shifted,)), "function g0", "bytes 4100..8196", "'g0_in'", "8192 bytes")


def test_two_cores_on_one_tile_are_refused(add_one):
    refused(replace(add_one, cores=add_one.cores * 2), "two cores run on one tile")


def test_a_core_off_a_compute_tile_is_refused(add_one):
    refused(with_program(add_one, *add_one.cores[0].program, tile=Tile(0, 1, TileKind.MEM)), "g0", "mem_0_1")


def test_acquires_and_releases_that_do_not_balance_are_refused(add_one):
    program = add_one.cores[0].program
    refused(with_program(add_one, Acquire(FifoId("g0", Stem.IN), C), *program), "tile_0_2", "g0_in (Consume)")


def test_a_release_of_more_than_the_core_holds_is_refused(add_one):
    refused(with_program(add_one, Release(FifoId("g0", Stem.IN), C), Acquire(FifoId("g0", Stem.IN), C)), "tile_0_2", "releases 1", "g0_in",
            "holding 0")


def test_a_fifo_the_plan_lacks_or_used_at_the_wrong_end_is_refused(add_one):
    refused(with_program(add_one, Acquire(FifoId("g9", Stem.IN), C), Release(FifoId("g9", Stem.IN), C)), "tile_0_2", "g9_in")
    refused(with_program(add_one, Acquire(FifoId("g0", Stem.IN), P), Release(FifoId("g0", Stem.IN), P)), "tile_0_2", "g0_in", "Produce")


def test_taking_more_objects_than_the_depth_is_refused(add_one):
    refused(with_program(add_one, Acquire(FifoId("g0", Stem.IN), C, 3), Release(FifoId("g0", Stem.IN), C, 3)), "tile_0_2", "3 objects",
            "g0_in", "depth is 2")


def test_invoking_an_undefined_function_or_with_the_wrong_objects_is_refused(add_one):
    program = add_one.cores[0].program
    held = [op for op in program if not isinstance(op, Invoke)]
    refused(with_program(add_one, *held[:2], Invoke("g7", (FifoId("g0", Stem.IN), FifoId("g0", Stem.HOST))), *held[2:]), "tile_0_2", "g7")
    refused(with_program(add_one, *held[:2], Invoke("g0", (FifoId("g0", Stem.IN),)), *held[2:]), "tile_0_2", "g0",
            "1 object(s)", "2 parameter(s)")
    refused(with_program(add_one, *held[:2], Invoke("g0", (FifoId("g0", Stem.IN), "g1_buf0")), *held[2:]), "tile_0_2",
            "'g1_buf0'", "g0")


def test_a_loop_running_no_times_is_refused(add_one):
    refused(with_program(add_one, Loop(0, add_one.cores[0].program)), "tile_0_2", "0 times")


def test_a_blocked_function_invoked_outside_a_loop_is_refused():
    plan = compile_program(designs.trace(designs.big_matvec()), from_name("npu1"))   # split on npu1, whose grid reads the matrix through no more shim channels than the split, so the split is taken
    core = plan.cores[0]
    (loop,) = [op for op in core.program if isinstance(op, Loop)]
    flat = tuple(op for item in core.program for op in (loop.body if item is loop else (item,)))
    broken = replace(plan, cores=(replace(core, program=flat), *plan.cores[1:]))
    with pytest.raises(PlanError) as err:
        check_cores(broken)
    assert all(name in str(err.value) for name in ("BigMatVec", "tile_0_2", "g0_p0_block", "outside a Loop"))


def test_a_core_program_holding_something_else_is_refused(add_one):
    refused(with_program(add_one, Load(FifoId("g0", Stem.IN), 0)), "tile_0_2", "Load")


def test_a_scalar_step_missing_an_operand_or_an_immediate_past_int32_is_refused(add_one):
    host = Ptr(FifoId("g0", Stem.HOST), 0)
    refused(with_function(add_one, steps=(ScalarStep(host, WordOp.MOD, Imm(7)),)), "function g0",
            "ScalarStep(Ptr, Imm i32, NoneType)")
    refused(with_function(add_one, steps=(ScalarStep(host, WordOp.ADD, Imm(2**31), Imm(1)),)), "function g0",
            "Imm i32")
    check_functions(with_function(add_one, steps=(ScalarStep(host, WordOp.ADD, Imm(2**31 - 1), Imm(-2**31)),)))

