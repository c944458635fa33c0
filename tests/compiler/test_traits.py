"""Fusion, placement and lowering decide from the traits a kernel declares (its Role, its bounded
per-call attributes), never from its class: user kernels declaring the traits of MatVec, SiLU
and Softmax compile to the design the library kernels give, and a kernel declaring no role
fuses by the general rules only."""

import numpy as np

import iron
from aie_utils import from_name
from iron import Role, Scratchpad, Within
from iron.compiler.compile import compile_program
from iron.compiler.mlir import print_mlir
from iron.kernels import LIBRARY, MatVec, SiLU, Softmax

NPU2 = from_name("npu2")


class RowDot(iron.Kernel):
    """MatVec's shape rule, C ABI and numpy under another name: a user matrix kernel."""

    name, arity = "row_dot", 2
    role = Role.MATRIX
    out_shape, sizes, abi_shapes = MatVec.out_shape, MatVec.sizes, MatVec.abi_shapes
    compute = staticmethod(MatVec.compute)


class Swish(iron.Kernel):
    """SiLU under another name: a user elementwise kernel."""

    name = "swish"
    role = Role.ELEMENTWISE
    dtypes = SiLU.dtypes
    compute = staticmethod(SiLU.compute)


class Normalize(iron.Kernel):
    """Softmax under another name: a user row reduction with a valid length in 1..n."""

    name = "normalize"
    role = Role.ROW_REDUCTION
    bounds = {"length": Within(1)}
    dtypes, attrs, scalar_attrs, c_attrs = Softmax.dtypes, Softmax.attrs, Softmax.scalar_attrs, Softmax.c_attrs
    out_shape = Softmax.out_shape
    compute = staticmethod(Softmax.compute)


class Plain(iron.Kernel):
    """SiLU's numpy with no role declared."""

    name = "plain_silu"
    dtypes = SiLU.dtypes
    compute = staticmethod(SiLU.compute)


class RowSums(iron.Kernel):
    """A one-input matrix kernel: the sum of each row of M (M, K)."""

    name = "row_sums"
    role = Role.MATRIX
    dtypes = (np.dtype(np.float32),)

    @classmethod
    def out_shape(cls, shapes, **attrs):
        return (shapes[0][0],)

    @classmethod
    def sizes(cls, shapes, out_shape):
        return tuple(shapes[0])

    @classmethod
    def abi_shapes(cls, sizes):
        return [sizes], (sizes[0],)

    @staticmethod
    def compute(m):
        return m.sum(axis=1)


def head(matrix, act, norm, rows=512, cols=256):
    """norm(act(W @ x), length=n + 1) for a (rows, cols) float32 param W: 512 KiB, split over 4 tiles."""

    class Head(iron.Graph):
        def __init__(self):
            self.w = iron.param(np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32))

        def body(self, x, *, n: Scratchpad[np.int32]):
            return norm.step(act.step(matrix.step(self.w, x)), length=n + 1)

    return compile_program(Head().trace(x=((cols,), np.float32)), NPU2)


def renamed(text: str) -> str:
    for user, library in (("RowDot", "MatVec"), ("Swish", "SiLU"), ("Normalize", "Softmax")):
        text = text.replace(user, library)
    return text


def test_user_kernels_with_library_traits_fuse_and_place_like_the_library():
    library, user = head(MatVec, SiLU, Softmax), head(RowDot, Swish, Normalize)
    assert library.groups == (("g0", ("MatVec#0", "SiLU#1")), ("g1", ("Softmax#2",)))
    assert [(g, tuple(map(renamed, calls))) for g, calls in user.groups] == list(library.groups)
    assert [(rule, renamed(what)) for rule, what in user.rules] == list(library.rules)
    assert ("split_matrix_over_tiles", "g0: w (512, 256) float32 (524288 bytes) split by rows over 4 tiles") \
        in library.rules
    assert print_mlir(user) == print_mlir(library)


def test_a_declared_bound_becomes_the_bound_of_the_per_call_word():
    library, user = head(MatVec, SiLU, Softmax), head(RowDot, Swish, Normalize)
    bounded = [(w.name, w.bound, renamed(w.what)) for w in user.words if w.bound is not None]
    assert bounded == [("n + 1", (1, 513), "Softmax length=n + 1")]
    assert bounded == [(w.name, w.bound, w.what) for w in library.words if w.bound is not None]


def test_a_kernel_without_a_role_does_not_join_a_matrix_group():
    plan = head(MatVec, Plain, Softmax)
    assert plan.groups == (("g0", ("MatVec#0",)), ("g1", ("Plain#1", "Softmax#2")))
    assert ("matrix_op_starts_group", "g0 closed before Plain#1") in plan.rules


def test_every_library_kernel_declares_a_role_and_a_new_kernel_declares_none():
    # Concat joins along an axis, RoPE turns pairs, a convolution or pooling reads a window of pixels,
    # attention every cache row: no element-wise, matrix, row-reduction or expansion shape
    assert [k.__name__ for k in LIBRARY if k.role is Role.OTHER] == [
        "Concat", "RoPE", "Conv2D", "MaxPool2D", "AvgPool2D", "Attention"]
    assert [k.__name__ for k in LIBRARY if k.role is Role.EXPANSION] == ["Dequant"]
    assert Plain.role is Role.OTHER and Plain.bounds == {}


def test_a_matrix_kernel_of_one_input_compiles_and_runs(on_emulator):
    """The whole-array tiling rules take matrix calls of two operands; one of one operand is placed
    like any group (it used to crash the rule that picks the grid)."""

    class Sums(iron.Graph):
        def body(self, m):
            return RowSums.step(m)

    m = np.arange(24, dtype=np.float32).reshape(4, 6)
    graph = Sums()
    compiled = graph.compile(m=((4, 6), np.float32), device=NPU2)
    assert compiled.plan.groups == (("g0", ("RowSums#0",)),)
    np.testing.assert_array_equal(compiled(m), m.sum(axis=1))
    np.testing.assert_array_equal(graph.reference(m), m.sum(axis=1))
