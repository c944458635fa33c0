"""The XRT path end to end, as a contract test: a compiled graph's XrtSession drives the pyxrt
stand-in (tests/runtime/fake_pyxrt.py, which enforces pyxrt's documented rules), and the
stand-in's device runs each completed run's Plan on the emulator with the run's own buffers and
control scratchpad. So the argument order, the scratchpad words, the feedback ring and the reads
the session makes are checked by the results they give, not only by the calls they record
(the `xrt` fixture is in tests/conftest.py).
No NPU is involved: this is not a hardware test."""
import numpy as np
import pytest

import iron
from iron.kernels import Exp, MatMul
from iron.models.designs import Walk, numpy_walk
from iron.plan.plan import Fill


def test_host_driven_calls_through_xrt_give_the_reference_walk(xrt):
    succ = np.random.default_rng(4).permutation(12).astype(np.int32)
    walk = Walk(succ, 7)
    body = walk.compile(device="npu2")
    nxt = iron.Carry(node=2, steps=0)
    for _ in range(7):
        nxt = body(**nxt)
    assert dict(nxt) == {"node": int(numpy_walk(succ, 2, 7)[-1]), "steps": 7}
    np.testing.assert_array_equal(body.read("trail"), numpy_walk(succ, 2, 7))
    calls = xrt.fake_state.calls
    assert calls[:3] == ["device(0) -> dev1", f"elf('{body.artifacts.elf.name}') -> elf1", "hw_context(dev1, elf1) -> ctx1"]
    assert "ext.kernel(ctx1, 'main:sequence') -> kernel1" in calls


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_a_device_loop_through_xrt_rings_the_scratchpads(xrt, depth):
    succ, steps = np.random.default_rng(5).permutation(16).astype(np.int32), 9
    walk = Walk(succ, steps + 1)
    body = walk.compile(device="npu2")
    loop = iron.CarriedLoop(body, body, depth=depth)
    assert list(loop.run(steps, node=7, steps=0)) == list(range(steps))
    np.testing.assert_array_equal(body.read("trail"), numpy_walk(succ, 7, steps + 1))
    assert dict(loop.carry) == {"node": int(numpy_walk(succ, 7, steps + 1)[-1]), "steps": steps + 1}


def test_a_tensor_taking_first_version_feeds_the_body_through_xrt(xrt):
    from test_carried_loop import Trail

    succ, steps = np.random.default_rng(6).permutation(12).astype(np.int32), 5
    trail = Trail(succ, steps + 1)
    body = trail.compile(device="npu2")
    first = trail.compile(start=((), np.int32), device="npu2", feeds=body)
    loop = iron.CarriedLoop(first, body, depth=2)
    assert list(loop.run(steps, np.array(4, np.int32), node=0, steps=0)) == list(range(steps))
    np.testing.assert_array_equal(body.read("trail"), np.concatenate([[4], numpy_walk(succ, 4, steps)]))


def test_a_loop_stopped_and_resumed_through_xrt_and_a_write_waiting_for_it(xrt):
    succ = np.random.default_rng(8).permutation(16).astype(np.int32)
    walk = Walk(succ, 16)
    body = walk.compile(device="npu2")
    loop = iron.CarriedLoop(body, body, depth=3).start(node=2, steps=0)
    assert list(loop.steps(3)) == [0, 1, 2]
    for index in loop.steps(8):
        if index == 4:
            break                                     # steps 5 and 6 in flight: they complete
    assert loop.transitions == 8 and dict(loop.carry) == {"node": int(numpy_walk(succ, 2, 8)[-1]), "steps": 8}
    it = loop.steps(4)
    assert next(it) == 7                              # steps 8, 9 in flight (writing trail[9], trail[10])
    body.write(walk.trail, np.zeros(16, np.int32))   # waits for them, then lands
    assert list(it) == [8, 9, 10]
    expect = numpy_walk(succ, 2, 12)
    expect[:11] = 0
    np.testing.assert_array_equal(body.read("trail")[:12], expect)
    assert dict(loop.carry) == {"node": int(numpy_walk(succ, 2, 12)[-1]), "steps": 12}


class ExpThenProduct(iron.Graph):
    """Exp's result crosses a segment cut padded to K = 512 for the MatMul reading it
    (`pad_written_by_producer`: Exp keeps no zeros, so it may not stream over x padded): Exp
    writes only its user's region of the cut buffer."""

    def __init__(self, b):
        self.b = iron.weight(b)

    def body(self, x):
        return MatMul.step(Exp.step(x), self.b)


def test_a_padded_cut_buffers_padding_is_written_zeros_since_a_new_bo_holds_any_bytes(xrt):
    """The stand-in's new BOs hold 0xff bytes (NaN as float32), as XRT promises nothing of them:
    the session writes the padding no kernel writes, so the K padding is zeros, not NaN."""
    rng = np.random.default_rng(3)
    x, b = rng.standard_normal((64, 509)).astype(np.float32), rng.standard_normal((509, 64)).astype(np.float32)
    graph = ExpThenProduct(b)
    body = graph.compile(x=x, device="npu2")
    cut = [(p.name, p.shape, p.padded) for p in body.plan.placements if p.fill is Fill.WRITTEN]
    assert cut == [("cut.Exp#0", (64, 509), (64, 512))]
    np.testing.assert_allclose(body(x=x), graph.reference(x=x), rtol=1e-4, atol=1e-4)
