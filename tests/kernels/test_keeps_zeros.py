"""The kernel trait `keeps_zeros` (padding.py's `pad_through_zeros`, `pad_upstream_zeros` rely on
it): every library kernel that declares it is elementwise and maps zeros to zeros in each of its
signatures, by its own compute; every other elementwise one maps zeros to something else in some
signature (Minimum of uint8 and a constant keeps them, of int8 not). A
binary kernel's constant form (`Mul.step(x, 3)`) keeps zeros when it does for every constant, on
either side: tried with constants of both signs and 0."""
import numpy as np
import pytest

from iron.kernels import LIBRARY, Role

ATTRS = {"factor": 2.5, "shift": 3, "scale": 7, "alpha": 0.25, "zero_point": 0}   # any value: a kernel that keeps zeros keeps them for all
CONSTANTS = [{"value": v, "fvalue": f, "flip": flip} for v, f in ((3, 2.5), (-3, -2.5), (0, 0.0)) for flip in (0, 1)]


def keeps(kernel, dtype, out) -> bool:
    """Whether the kernel's reference on zeros of `dtype` giving `out` (an accumulating kernel's
    destination zeros too) is zeros, with every constant a constant form may take."""
    zeros = [np.zeros(5, dtype)] * (kernel.arity + kernel.accumulates)
    tried = CONSTANTS if "flip" in kernel.attrs else [{}]
    results = [kernel.reference_fn(np.dtype(dtype), {**{n: ATTRS[n] for n in kernel.attrs if n in ATTRS}, **c}, out)(*zeros)
               for c in tried if np.dtype(dtype).kind != "u" or c.get("value", 0) >= 0]
    return not any(np.any(r.astype(np.float32)) for r in results)


ELEMENTWISE = [k for k in LIBRARY if k.role is Role.ELEMENTWISE]


@pytest.mark.parametrize("kernel", ELEMENTWISE, ids=[k.__qualname__ for k in ELEMENTWISE])
def test_an_elementwise_kernel_keeps_zeros_exactly_when_its_compute_maps_zeros_to_zeros(kernel):
    kept = {(str(d), str(o)): keeps(kernel, d, o) for d, o in kernel.signatures()}
    assert kept
    assert all(kept.values()) == kernel.keeps_zeros, kept   # one that does not declares it fails in some signature


def test_the_kernels_that_keep_zeros():
    assert sorted(k.__qualname__ for k in LIBRARY if k.keeps_zeros) == [
        "Accumulate", "Add", "Axpy", "BitwiseAnd", "BitwiseAnd.constant", "BitwiseOr", "BitwiseXor", "Cast", "Copy",
        "GELU", "GELUTanh", "Greater", "LeakyReLU", "Less", "Maximum", "Minimum", "Mod", "Mod.constant", "Mul", "Mul.constant",
        "NotEqual", "ReLU", "Requantize", "Scale", "ShiftLeft", "ShiftRight", "SiLU", "Sub", "Tanh", "Where"]


def test_requantize_keeps_zeros_only_with_zero_point_0():
    """Its zero point is added after the shift: zeros become the zero point, which the padding
    of a padded product must not hold."""
    requantize = next(k for k in LIBRARY if k.__name__ == "Requantize")
    shifted = {"shift": 3, "scale": 7}
    with_point = requantize.reference_fn(np.dtype(np.int32), {**shifted, "zero_point": -5}, np.dtype(np.int8))
    assert with_point(np.zeros(3, np.int32)).tolist() == [-5, -5, -5]
    assert (requantize.keeps_zeros_in({**shifted, "zero_point": -5}), requantize.keeps_zeros_in(shifted)) == (False, True)


def test_a_constant_form_keeps_zeros_with_the_constants_that_keep_them():
    """`Add.step(x, 0)` and `Maximum.step(x, 0)` keep zeros, `Add.step(x, 1)` and `Sub.step(1, x)`
    do not, `Mul.step(x, c)` does for every c; a per-call constant never counts as keeping them."""
    forms = {k.__qualname__: k for k in LIBRARY if "flip" in k.attrs}
    def keeps(name, **attrs):
        return forms[name].keeps_zeros_in({"value": 0, "fvalue": 0.0, "flip": 0, **attrs})
    assert (keeps("Add.constant"), keeps("Maximum.constant"), keeps("Add.constant", value=1),
            keeps("Sub.constant", value=1, fvalue=1.0, flip=1), keeps("Mul.constant", value=5, fvalue=2.5)) == (
        True, True, False, False, True)
    assert forms["Add.constant"].keeps_zeros_in({"fvalue": 0.0, "flip": 0}) is False   # value is per call
    for kernel in forms.values():
        for attrs in CONSTANTS:
            if kernel.keeps_zeros_in(attrs):
                for dtype in (d for d in (np.dtype(np.int32), np.dtype(np.float32)) if d in kernel.dtypes):
                    assert not kernel.reference(np.zeros(4, dtype), **attrs).any()
