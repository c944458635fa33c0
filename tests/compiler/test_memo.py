"""memo.by_shape: a grid kept by the call's structure (CallShape) is the one computed afresh,
bound to the asking call's own nodes; calls differing in a dtype or a shape are kept apart."""
import numpy as np

from aie_utils import from_name
from iron.compiler.memo import CallShape
from iron.compiler.tiling import choose_grid
from tests.compiler.designs import Product, operands

NPU2 = from_name("npu2")


def product_call(m, k, n, dtype, seed=0):
    a, b = operands(m, k, n, dtype, seed)
    (call,) = Product(b).trace(a=a).calls
    return call


def whole_device(call):
    return choose_grid(call, tuple(range(NPU2.n_cols)), NPU2.n_cols * len(NPU2.compute_rows), NPU2,
                       NPU2.n_cols * NPU2.shim.dma_out_channels, None, None, None)


def test_alike_calls_share_one_grid_each_bound_to_its_own_call():
    first, second = product_call(256, 512, 256, np.float32), product_call(256, 512, 256, np.float32, seed=1)
    assert first is not second and CallShape.of(first) == CallShape.of(second)
    kept, asked = whole_device(first), whole_device(second)
    assert (kept.call, asked.call) == (first, second)
    fresh = choose_grid.__wrapped__(second, tuple(range(NPU2.n_cols)), NPU2.n_cols * len(NPU2.compute_rows), NPU2,
                                 NPU2.n_cols * NPU2.shim.dma_out_channels, None, None, None)
    assert asked == fresh
    assert (asked.rows, asked.cols, asked.m, asked.k, asked.n) == (kept.rows, kept.cols, kept.m, kept.k, kept.n)


def test_calls_differing_in_dtype_or_shape_are_kept_apart():
    f32, bf16 = product_call(256, 512, 256, np.float32), product_call(256, 512, 256, np.dtype("bfloat16"))
    wider = product_call(256, 512, 512, np.float32)
    assert len({CallShape.of(c) for c in (f32, bf16, wider)}) == 3
    grids = [whole_device(c) for c in (f32, bf16, wider)]
    assert [g.call for g in grids] == [f32, bf16, wider]
    assert [g.sides for g in grids] == [(256, 512, 256), (256, 512, 256), (256, 512, 512)]
