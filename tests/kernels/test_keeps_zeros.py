"""The kernel trait `keeps_zeros` (pad.py's `pad_through_zeros`, `pad_upstream_zeros` rely on
it): every library kernel that declares it is elementwise and maps zeros to zeros in each of its
signatures, by its own compute; every other elementwise one maps zeros to something else."""
import numpy as np
import pytest

from iron.kernels import LIBRARY, Role

ATTRS = {"factor": 2.5, "shift": 3, "scale": 7, "zero_point": 0}   # a kernel that keeps zeros keeps them for these


def on_zeros(kernel, dtype, out) -> np.ndarray:
    """The kernel's reference on zeros of `dtype` giving `out` (an accumulating kernel's destination zeros too)."""
    attrs = {name: ATTRS[name] for name in kernel.attrs}
    zeros = [np.zeros(5, dtype)] * (kernel.arity + kernel.accumulates)
    return kernel.reference_fn(np.dtype(dtype), attrs, out)(*zeros)


ELEMENTWISE = [k for k in LIBRARY if k.role is Role.ELEMENTWISE]


@pytest.mark.parametrize("kernel", ELEMENTWISE, ids=[k.__name__ for k in ELEMENTWISE])
def test_an_elementwise_kernel_keeps_zeros_exactly_when_its_compute_maps_zeros_to_zeros(kernel):
    got = {(str(d), str(o)): on_zeros(kernel, d, o) for d, o in kernel.signatures()}
    assert got
    kept = {sig: not np.any(r.astype(np.float32)) for sig, r in got.items()}
    assert kept == dict.fromkeys(got, kernel.keeps_zeros)


def test_the_kernels_that_keep_zeros():
    assert sorted(k.__name__ for k in LIBRARY if k.keeps_zeros) == [
        "Accumulate", "Add", "Cast", "Copy", "Mul", "ReLU", "Requantize", "Scale", "SiLU", "Sub"]


def test_requantize_keeps_zeros_only_with_zero_point_0():
    """Its zero point is added after the shift: zeros become the zero point, which the padding
    of a padded product must not hold."""
    requantize = next(k for k in LIBRARY if k.__name__ == "Requantize")
    shifted = {"shift": 3, "scale": 7}
    with_point = requantize.reference_fn(np.dtype(np.int32), {**shifted, "zero_point": -5}, np.dtype(np.int8))
    assert with_point(np.zeros(3, np.int32)).tolist() == [-5, -5, -5]
    assert (requantize.keeps_zeros_in({**shifted, "zero_point": -5}), requantize.keeps_zeros_in(shifted)) == (False, True)
