"""Elementwise work larger than a tile is streamed in blocks, not refused (issue 10): calls over
views lying in one run of words (`stream_contiguous_views`), shown by what describe() says and by
the emulator agreeing with reference() on npu2 and npu1. Floats within 1e-3."""
import numpy as np
import pytest

import iron
from aie_utils import from_name
from iron.kernels import Exp, ReLU

F32 = {"rtol": 1e-3, "atol": 1e-3}


def rule(plan, name):
    return [what for rule, what in plan.rules if rule == name]


class ExpOfTail(iron.Graph):
    def body(self, x):
        return Exp.step(x[1:])


class ReluOfFlat(iron.Graph):
    def body(self, x):
        return ReLU.step(x.reshape(-1))


@pytest.mark.parametrize("device, line", [
    ("npu2", "g0: Exp over 65536 elements streamed in blocks of 2048 over 32 tiles (4 rows x 8 columns of cores), "
             "1 blocks per core; x[1:] streamed as one run of words from element 1 of x (stream_contiguous_views)"),
    ("npu1", "g0: Exp over 65536 elements streamed in blocks of 2048 over 16 tiles (4 rows x 4 columns of cores), "
             "2 blocks per core; x[1:] streamed as one run of words from element 1 of x (stream_contiguous_views)"),
])
def test_elementwise_over_an_offset_slice_streams_from_its_first_word(device, line):
    x = np.random.default_rng(1).standard_normal(65537).astype(np.float32)
    body = ExpOfTail().compile(x=x, device=from_name(device))
    assert rule(body.plan, "stream_elementwise") == [line]
    np.testing.assert_allclose(body(x=x), ExpOfTail().reference(x=x), **F32)


@pytest.mark.parametrize("device, cores", [("npu2", "32 tiles (4 rows x 8 columns of cores), 3"),
                                           ("npu1", "16 tiles (4 rows x 4 columns of cores), 6")])
def test_elementwise_over_a_reshape_streams(device, cores):
    x = np.random.default_rng(2).standard_normal((509, 576)).astype(np.float32)
    body = ReluOfFlat().compile(x=x, device=from_name(device))
    assert rule(body.plan, "stream_elementwise") == [
        f"g0: ReLU over 293184 elements streamed in blocks of 3054 over {cores} blocks per core; "
        "x.reshape(293184,) streamed as one run of words from element 0 of x (stream_contiguous_views)"]
    np.testing.assert_array_equal(body(x=x), ReluOfFlat().reference(x=x))
