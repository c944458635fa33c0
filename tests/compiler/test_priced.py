"""The one estimate of a Plan (iron/compiler/priced.py, `plan_ns`) that every choice between whole
designs reads: it follows the serial chain the timed emulator runs (the sequence waiting on moves,
groups waiting on the values they read, a looping group's iterations one after another, DDR one
queue) and so agrees with the timed emulator, within a stated factor, and orders the loop and the
design spread in space as it does."""

import numpy as np
import pytest

from aie_utils import from_name
from iron.compiler import priced as priced_module
from iron.compiler import repeat as repeat_module
from iron.compiler.compile import compile_program
from iron.compiler.priced import Chain, Priced, ddr_bytes, plan_ns, priced, reconfigure_ns
from iron.plan import cost
from iron.plan.rules import Rule
from iron.runtime.compiled import CompiledGraph
from tests.compiler.test_repeat import Rows, rows_inputs
from tests.compiler.test_segments import DECODER_SIZE, guide_decoder
from tests.runtime.test_repeat_runs import Chain as Softmaxes
from tests.runtime.test_repeat_runs import N, Stack

F32 = np.float32
AGREES = 1.25   # the estimate within this factor of the timed emulator's device time, either way


def rows(count: int):
    x, y = rows_inputs(count)
    return Rows(count), (x, y), {}


def stack():
    return Stack(6), (np.random.default_rng(3).standard_normal(32).astype(F32),), {}


def softmaxes():
    return Softmaxes(3, 10), (np.random.default_rng(2).standard_normal(N).astype(F32),), {}


def decoder():
    return guide_decoder().Decoder(3, **DECODER_SIZE), (), {"pos": np.int32(3), "tok": np.int32(5)}


def loop_and_space(monkeypatch, make, device: str):
    """The graph's compiled design, and its two alternatives: the loop (one iteration placed, its
    cores looping) and the design spread in space, each with the timed emulator's device time."""
    loops = []
    chosen = repeat_module._chosen

    def keeping(plan, repeat, *rest):
        loops.append(plan)
        return chosen(plan, repeat, *rest)
    monkeypatch.setattr(repeat_module, "_chosen", keeping)
    graph, tensors, values = make()
    specs = tuple((t.shape, t.dtype) for t in tensors)
    compiled = graph.compile(*specs, device=device)
    (loop,) = loops
    space = compile_program(compiled.program, from_name(device), over_time=False)
    timed = {name: CompiledGraph(graph, compiled.program, plan).estimate(*tensors, **values).device_ns
             for name, plan in (("loop", loop), ("space", space))}
    return compiled.plan, {"loop": loop, "space": space}, timed


@pytest.mark.parametrize("make, device, faster", [
    (lambda: rows(40), "npu2", "loop"), (lambda: rows(40), "npu1", "loop"), (stack, "npu2_1col", "loop"),
    (softmaxes, "npu2_2col", "loop"), (decoder, "npu2", "space")])
def test_the_estimate_agrees_with_the_timed_emulator_and_chooses_its_faster_design(monkeypatch, make, device, faster):
    plan, plans, timed = loop_and_space(monkeypatch, make, device)
    for name, alternative in plans.items():
        assert 1 / AGREES < plan_ns(alternative) / timed[name] < AGREES, name
    assert min(timed, key=timed.get) == faster
    assert (plan.repeat is not None) == (faster == "loop")
    (choice,) = [c for _, c in plan.choices if c.rule is Rule.REPEAT_OVER_TIME]
    assert choice.chosen_ns == pytest.approx(plan_ns(plans[faster])) and choice.chosen_ns < choice.rejected_ns


def test_a_looping_group_runs_its_iterations_one_after_another_each_moving_computing_and_writing_back():
    plan = compile_program(Rows(40).trace(x=((40, 256), F32), y=((40, 256), F32)), from_name("npu2"))
    device, gen = plan.device, cost.generation(plan.device)
    (function,) = plan.functions
    # per iteration: x[i] and y[i] (2048 bytes) in, the Add, out[i] (1024 bytes) back, nothing overlapping:
    # the sequence waits on the iteration's moves before issuing the next one's
    moved_in, added, written = (cost.ns(device, c) for c in (
        cost.dma_cycles(gen, 2048), cost.function_cycles(gen, function), cost.dma_cycles(gen, 1024)))
    assert plan_ns(plan) == pytest.approx(40 * (moved_in + added + written))
    units = Chain(Priced.of(plan))
    units.ns()
    assert sorted(units.units) == [("g0", k) for k in range(40)]


def test_a_call_loads_each_of_its_configurations_the_first_again_after_the_last_of_the_call_before():
    plan = compile_program(Rows(40).trace(x=((40, 256), F32), y=((40, 256), F32)), from_name("npu2"),
                           over_time=False)
    assert len(plan.configurations) == 2
    chains = sum(Chain(Priced.of(c)).ns() for c in plan.configurations)
    assert plan_ns(plan) == pytest.approx(chains + 2 * cost.GENERATIONS["npu2"].reconfigure_ns)
    assert reconfigure_ns(plan.device, 1) == 0



def test_each_configuration_is_priced_once_for_the_estimate_and_its_ddr_bytes(monkeypatch):
    """plan_ns and ddr_bytes read one Priced per configuration: a segmented Plan priced again, and
    its DDR bytes asked after, price none of its configurations a second time."""
    plan = compile_program(Rows(40).trace(x=((40, 256), F32), y=((40, 256), F32)), from_name("npu2"),
                           over_time=False)
    made = []
    of = Priced.of.__func__
    monkeypatch.setattr(priced_module, "_PRICED", {})
    monkeypatch.setattr(Priced, "of", classmethod(lambda cls, c: made.append(c) or of(cls, c)))
    ns = plan_ns(plan)
    assert plan_ns(plan) == ns and ddr_bytes(plan) == sum(Priced.of(c).ddr_bytes for c in plan.configurations)
    assert made == [*plan.configurations, *plan.configurations]   # the second time by the sum just above
    assert [priced(c) for c in plan.configurations] == [priced(c) for c in plan.configurations]
