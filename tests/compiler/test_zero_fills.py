"""The zero-fill lattice (sides.py `Groups.zeros`): one pass per design giving each call's result, per
axis, what its padding holds when its group computes over inputs lying padded, carried through the
index maps; the layout pass reads it (`summed_unzeroed`, `Groups.zeros`) and never re-derives it."""
import numpy as np

import iron
from iron.compiler.fuse import fuse
from iron.compiler.sides import Groups, summed_unzeroed
from iron.kernels import Exp, MatMul, ReLU, Requantize, RMSNorm, Softmax
from iron.plan.rules import Fill, ZeroFill

F32 = np.float32
PRODUCT_WRITES = "made by a MatMul or MatVec, whose grid writes its blocks at its own row stride"


def lattice(graph, **inputs):
    """The design's calls in program order and their lattice values."""
    program = graph.trace(**{name: (shape, dtype) for name, (shape, dtype) in inputs.items()})
    groups = Groups(fuse(program))
    return program.calls, groups


class NormThenProduct(iron.Graph):
    def __init__(self):
        self.w, self.b = iron.weight(np.ones(64, F32)), iron.weight(np.ones((64, 32), F32))

    def body(self, x):
        return MatMul.step(RMSNorm.step(x, self.w), self.b)


def test_a_row_reduction_writes_zeros_past_each_rows_length_and_its_rows_of_padding_are_not_zeros():
    """RMSNorm reads each row up to its length and writes 0 past it (ROWS along its row); its padded
    rows are not zeros (its kernel declares no keeps_zeros, and w names no row), so the product of it
    holds zeros only along B's N: a MatMul reading it as A sums zeros, and its result's rows of
    padding come from RMSNorm."""
    (norm, product), groups = lattice(NormThenProduct(), x=((48, 64), F32))
    assert groups.zeros[norm] == ZeroFill((None, Fill.ROWS), norm)
    assert groups.zeros[product] == ZeroFill((None, Fill.ZEROS), norm, PRODUCT_WRITES)
    assert summed_unzeroed(norm, product, groups) is None


class ExpOfProduct(iron.Graph):
    def __init__(self):
        self.b = iron.weight(np.ones((64, 64), F32))

    def body(self, a):
        return MatMul.step(Exp.step(MatMul.step(a, self.b)), self.b)


def test_exp_maps_a_products_zeros_to_ones_and_the_next_product_would_sum_them():
    """A product of host tensors holds zeros on both axes; Exp(0) = 1, so Exp's padding is not
    zeros on either, Exp the call that maps them, and the MatMul reading it sums them as K."""
    (first, exp, last), groups = lattice(ExpOfProduct(), a=((64, 64), F32))
    assert groups.zeros[first] == ZeroFill((Fill.ZEROS, Fill.ZEROS), None, PRODUCT_WRITES)
    assert groups.zeros[exp].axes == (None, None) and groups.zeros[exp].unkept is exp
    assert summed_unzeroed(exp, last, groups) is groups.zeros[exp]


class ActThenProduct(iron.Graph):
    def __init__(self, act, **attrs):
        self.b, self.act, self.attrs = iron.weight(np.ones((64, 32), np.int16)), act, attrs

    def body(self, a):
        return MatMul.step(self.act.step(a, **self.attrs), self.b)


def test_kernels_keeping_zeros_keep_them_by_their_attrs():
    """ReLU keeps zeros (KEPT on both axes); Requantize keeps them with zero_point 0 only
    (`keeps_zeros_in`), and with zero_point 5 it is the call that maps them."""
    for act, dtype, attrs, kept in ((ReLU, np.int16, {}, True), (Requantize, np.int32, {"shift": 0}, True),
                                    (Requantize, np.int32, {"shift": 0, "zero_point": 5}, False)):
        graph = ActThenProduct(act, **attrs, **({"dtype": np.int16} if act is Requantize else {}))
        (made, product), groups = lattice(graph, a=((64, 64), dtype))
        want = ZeroFill((Fill.KEPT, Fill.KEPT)) if kept else ZeroFill((None, None), made)
        assert groups.zeros[made] == want, (act, attrs)
        assert (summed_unzeroed(made, product, groups) is None) is kept


class SoftmaxAsB(iron.Graph):
    def __init__(self):
        self.a = iron.weight(np.ones((32, 48), F32))

    def body(self, x):
        return MatMul.step(self.a, Softmax.step(x))


def test_a_product_reading_a_softmax_as_b_would_sum_its_rows_of_padding():
    """Softmax of a row of zeros is 1/n, not zeros: as B a MatMul sums Softmax's rows (its K), so the
    lattice refuses it (as A it would sum only the zeros written past each row's length)."""
    (softmax, product), groups = lattice(SoftmaxAsB(), x=((48, 64), F32))
    assert groups.zeros[softmax] == ZeroFill((None, Fill.ROWS), softmax)
    assert summed_unzeroed(softmax, product, groups) is groups.zeros[softmax]



class ExpOfRelu(iron.Graph):
    def body(self, x):
        return Exp.step(ReLU.step(x))


def test_leading_axes_the_map_repeats_over_are_carried_like_its_letters():
    """ReLU over (4, 8, 64): its map "i->i" names the last axis, the leading ones repeated, each
    keeping its zeros; Exp then maps them all, the call the lattice names."""
    (relu, exp), groups = lattice(ExpOfRelu(), x=((4, 8, 64), F32))
    assert groups.zeros[relu] == ZeroFill((Fill.KEPT,) * 3)
    assert groups.zeros[exp] == ZeroFill((None,) * 3, exp)
