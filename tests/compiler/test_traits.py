"""Fusion, padding, placement and lowering decide from the traits a kernel declares (its index
map, the axes it reduces, those read up to a per-call length, whether it keeps zeros, its bounded
per-call attributes), never from its class: user kernels declaring the maps of MatVec, MatMul,
SiLU and Softmax compile to the design the library kernels give, the Role is derived from the
map, and a kernel declaring no map fuses by the general rules only."""

import numpy as np
import pytest

import iron
from aie_utils import from_name
from iron import Role, Scratchpad, Within
from iron.compiler.compile import compile_program
from iron.errors import DeclarationError
from iron.kernels import LIBRARY, MatMul, MatVec, ReLU, SiLU, Softmax
from iron.kernels.traits import IndexMap
from iron.plan.mlir import print_mlir
from iron.plan.rules import Rule

NPU2 = from_name("npu2")


class RowDot(iron.Kernel):
    """MatVec's shape rule, C ABI and numpy under another name: a user matrix kernel."""

    name, arity = "row_dot", 2
    index_map = "mk,k->m"
    out_shape, sizes, abi_shapes = MatVec.out_shape, MatVec.sizes, MatVec.abi_shapes
    compute = staticmethod(MatVec.compute)


class Swish(iron.Kernel):
    """SiLU under another name: a user elementwise kernel."""

    name = "swish"
    index_map, keeps_zeros = "i->i", True
    dtypes = SiLU.dtypes
    compute = staticmethod(SiLU.compute)


class Normalize(iron.Kernel):
    """Softmax under another name: a user row reduction with a valid length in 1..n."""

    name = "normalize"
    index_map, reduces, length_axes = "rc->rc", "c", "c"
    bounds = {"length": Within(1)}
    dtypes, attrs, scalar_attrs, c_attrs = Softmax.dtypes, Softmax.attrs, Softmax.scalar_attrs, Softmax.c_attrs
    out_shape = Softmax.out_shape
    compute = staticmethod(Softmax.compute)


class Plain(iron.Kernel):
    """SiLU's numpy with no index map declared."""

    name = "plain_silu"
    dtypes = SiLU.dtypes
    compute = staticmethod(SiLU.compute)


class RowSums(iron.Kernel):
    """The sum of each row of M (M, K): one input, its last axis reduced, so a row reduction."""

    name = "row_sums"
    index_map = "rc->r"
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
    assert (Rule.SPLIT_MATRIX_OVER_TILES, "g0: w (512, 256) float32 (524288 bytes) split by rows over 4 tiles") \
        in library.rules
    assert print_mlir(user) == print_mlir(library)


def test_a_declared_bound_becomes_the_bound_of_the_per_call_word():
    library, user = head(MatVec, SiLU, Softmax), head(RowDot, Swish, Normalize)
    bounded = [(w.name, w.bound, renamed(w.what)) for w in user.words if w.bound is not None]
    assert bounded == [("n + 1", (1, 513), "Softmax length=n + 1")]
    assert bounded == [(w.name, w.bound, w.what) for w in library.words if w.bound is not None]


def test_a_kernel_without_a_map_does_not_join_a_matrix_group():
    plan = head(MatVec, Plain, Softmax)
    assert plan.groups == (("g0", ("MatVec#0",)), ("g1", ("Plain#1", "Softmax#2")))
    assert (Rule.MATRIX_OP_STARTS_GROUP, "g0 closed before Plain#1") in plan.rules


LIBRARY_TRAITS = {   # kernel: (index map, reduces, length_axes, keeps_zeros, derived Role)
    "Copy": ("i->i", "", "", True, Role.ELEMENTWISE), "Add": ("i,i->i", "", "", True, Role.ELEMENTWISE),
    "Sub": ("i,i->i", "", "", True, Role.ELEMENTWISE), "Mul": ("i,i->i", "", "", True, Role.ELEMENTWISE),
    "Scale": ("i->i", "", "", True, Role.ELEMENTWISE), "ReLU": ("i->i", "", "", True, Role.ELEMENTWISE),
    "SiLU": ("i->i", "", "", True, Role.ELEMENTWISE), "Exp": ("i->i", "", "", False, Role.ELEMENTWISE),
    "Accumulate": ("i->i", "", "", True, Role.ELEMENTWISE), "MatVec": ("mk,k->m", "k", "", False, Role.MATRIX),
    "MatMul": ("mk,kn->mn", "k", "", False, Role.MATRIX),
    "MatMulAccumulate": ("mk,kn->mn", "k", "", False, Role.MATRIX),
    "RMSNorm": ("rc,c->rc", "c", "c", False, Role.ROW_REDUCTION),
    "Softmax": ("rc->rc", "c", "c", False, Role.ROW_REDUCTION), "Argmax": ("rc->r", "c", "c", False, Role.ROW_REDUCTION),
    "Cast": ("i->i", "", "", True, Role.ELEMENTWISE), "Requantize": ("i->i", "", "", True, Role.ELEMENTWISE),
    "Concat": (None, "", "", False, Role.OTHER), "RoPE": (None, "", "", False, Role.OTHER),
    "Max": ("rc->r", "c", "", False, Role.ROW_REDUCTION), "ArgmaxBlocks": ("b,b->", "b", "", False, Role.ROW_REDUCTION),
    "Dequant": ("rb->rc", "", "", False, Role.EXPANSION), "QMatVec": ("mk,k->m", "k", "", False, Role.MATRIX),
    # a window of pixels, a key/value head per group of query heads: no map, so Role.OTHER
    "Conv2D": (None, "", "", False, Role.OTHER), "MaxPool2D": (None, "", "", False, Role.OTHER),
    "AvgPool2D": (None, "", "", False, Role.OTHER), "Attention": (None, "", "", False, Role.OTHER),
    "Strided": (None, "", "", False, Role.OTHER),   # its input's elements in another order
    "Scatter": (None, "", "", False, Role.OTHER),   # its input's elements placed among its destination's
    "StridedRows": ("rb->rc", "", "", False, Role.EXPANSION),   # each row a step slice of one row
    "Maximum": ("i,i->i", "", "", True, Role.ELEMENTWISE),
    "Minimum": ("i,i->i", "", "", True, Role.ELEMENTWISE),
    "Greater": ("i,i->i", "", "", True, Role.ELEMENTWISE),
    "GreaterEqual": ("i,i->i", "", "", False, Role.ELEMENTWISE),
    "Less": ("i,i->i", "", "", True, Role.ELEMENTWISE),
    "LessEqual": ("i,i->i", "", "", False, Role.ELEMENTWISE),
    "Equal": ("i,i->i", "", "", False, Role.ELEMENTWISE),
    "NotEqual": ("i,i->i", "", "", True, Role.ELEMENTWISE),
    "BitwiseAnd": ("i,i->i", "", "", True, Role.ELEMENTWISE),
    "BitwiseOr": ("i,i->i", "", "", True, Role.ELEMENTWISE),
    "BitwiseXor": ("i,i->i", "", "", True, Role.ELEMENTWISE),
    "ShiftLeft": ("i,i->i", "", "", True, Role.ELEMENTWISE),
    "ShiftRight": ("i,i->i", "", "", True, Role.ELEMENTWISE),
    "Mod": ("i,i->i", "", "", True, Role.ELEMENTWISE),
    "Where": ("i,i,i->i", "", "", True, Role.ELEMENTWISE),
    "BitwiseNot": ("i->i", "", "", False, Role.ELEMENTWISE),
    "Tanh": ("i->i", "", "", True, Role.ELEMENTWISE),
    "Sigmoid": ("i->i", "", "", False, Role.ELEMENTWISE),
    "GELU": ("i->i", "", "", True, Role.ELEMENTWISE),
    "GELUTanh": ("i->i", "", "", True, Role.ELEMENTWISE),
    "LeakyReLU": ("i->i", "", "", True, Role.ELEMENTWISE),
    "Axpy": ("i,i->i", "", "", True, Role.ELEMENTWISE),
    "Min": ("rc->r", "c", "", False, Role.ROW_REDUCTION),
    "Sum": ("rc->r", "c", "", False, Role.ROW_REDUCTION),
    "LayerNorm": ("rc->rc", "c", "c", False, Role.ROW_REDUCTION),
    "LayerNormAffine": ("rc,c,c->rc", "c", "c", False, Role.ROW_REDUCTION),
    "Add.constant": ("i->i", "", "", False, Role.ELEMENTWISE),
    "Sub.constant": ("i->i", "", "", False, Role.ELEMENTWISE),
    "Mul.constant": ("i->i", "", "", True, Role.ELEMENTWISE),
    "Maximum.constant": ("i->i", "", "", False, Role.ELEMENTWISE),
    "Minimum.constant": ("i->i", "", "", False, Role.ELEMENTWISE),
    "Greater.constant": ("i->i", "", "", False, Role.ELEMENTWISE),
    "GreaterEqual.constant": ("i->i", "", "", False, Role.ELEMENTWISE),
    "Less.constant": ("i->i", "", "", False, Role.ELEMENTWISE),
    "LessEqual.constant": ("i->i", "", "", False, Role.ELEMENTWISE),
    "Equal.constant": ("i->i", "", "", False, Role.ELEMENTWISE),
    "NotEqual.constant": ("i->i", "", "", False, Role.ELEMENTWISE),
    "BitwiseAnd.constant": ("i->i", "", "", True, Role.ELEMENTWISE),
    "BitwiseOr.constant": ("i->i", "", "", False, Role.ELEMENTWISE),
    "BitwiseXor.constant": ("i->i", "", "", False, Role.ELEMENTWISE),
    "ShiftLeft.constant": ("i->i", "", "", False, Role.ELEMENTWISE),
    "ShiftRight.constant": ("i->i", "", "", False, Role.ELEMENTWISE),
    "Mod.constant": ("i->i", "", "", True, Role.ELEMENTWISE),
}


def test_every_library_kernel_declares_its_map_and_its_role_is_derived():
    # Concat joins along an axis, RoPE turns pairs: no map, so Role.OTHER
    got = {k.__qualname__: (k.traits.index_map and str(k.traits.index_map), k.traits.reduces, k.traits.length_axes,
                        k.traits.keeps_zeros, k.role) for k in LIBRARY}
    assert got == LIBRARY_TRAITS
    assert Plain.role is Role.OTHER and Plain.traits.index_map is None and Plain.bounds == {}
    assert (RowDot.role, Swish.role, Normalize.role, RowSums.role) == (
        Role.MATRIX, Role.ELEMENTWISE, Role.ROW_REDUCTION, Role.ROW_REDUCTION)
    assert IndexMap.parse("mk, kn -> mn", "K") == IndexMap(("mk", "kn"), "mn")
    # QMatVec stores W's k in GGUF blocks: a MatVec's map, its k packed; no other kernel packs an axis
    assert {k.__qualname__: k.traits.packed for k in LIBRARY if k.traits.packed} == {"QMatVec": "k"}


def declare(**traits):
    return type("Bad", (iron.Kernel,), {"arity": 2, **traits})


@pytest.mark.parametrize("traits, names", [
    ({"role": Role.MATRIX}, ["Bad declares role = Role.MATRIX", "index_map = 'mk,kn->mn'"]),
    ({"index_map": "mk,kn"}, ["Bad declares index_map = 'mk,kn'", "einsum"]),
    ({"index_map": "mK,kn->mn"}, ["index_map = 'mK,kn->mn'"]),
    ({"index_map": "mm,kn->mn"}, ["index_map = 'mm,kn->mn'"]),
    ({"index_map": "i->i"}, ["index_map = 'i->i' of 1 inputs, but arity = 2"]),
    ({"index_map": "rc,c->rc", "reduces": "x"}, ["reduces = 'x'", "has no axis x"]),
    ({"index_map": "rc,c->rc", "length_axes": "c"}, ["length_axes = 'c' but takes no length", "('length', 'i32')"]),
    ({"index_map": "mk,k->m", "packed": "n"}, ["packed = 'n'", "input 0's map ('mk')", "block_bytes"]),
    ({"index_map": "mk,k->m", "packed": "k"}, ["packed = 'k'", "the attr block_bytes"]),
])
def test_a_malformed_declaration_is_refused_naming_the_kernel_and_the_fix(traits, names):
    with pytest.raises(DeclarationError) as refused:
        declare(**traits)
    assert all(name in str(refused.value) for name in names)


class Product(iron.Kernel):
    """MatMul's map, shape rule, C ABI and numpy under another name: a user matrix kernel."""

    name, arity = "product_of", 2
    index_map = "mk,kn->mn"
    dtypes, results = MatMul.dtypes, MatMul.results
    out_shape, sizes, abi_shapes = MatMul.out_shape, MatMul.sizes, MatMul.abi_shapes
    compute = staticmethod(MatMul.compute)


def product_then_relu(matrix, m, k, n):
    """relu(a @ b) for an input a (m, k) and a float32 param b (k, n)."""

    class ProductThenReLU(iron.Graph):
        def __init__(self):
            self.b = iron.param(np.random.default_rng(1).standard_normal((k, n)).astype(np.float32))

        def body(self, a):
            return ReLU.step(matrix.step(a, self.b))

    return ProductThenReLU()


def facts(plan):
    """What padding, tiling and streaming decided, the user kernel's name read as MatMul's."""
    def named(text):
        return str(text).replace("Product", "MatMul")
    return ([(g, tuple(map(named, calls))) for g, calls in plan.groups], [(r, named(t)) for r, t in plan.rules],
            [(named(p.name), p.shape, p.padded) for p in plan.placements])


@pytest.mark.parametrize("m, k, n, rule", [
    (509, 509, 509, Rule.TILE_MATMUL_OVER_ARRAY),   # prime sides: padded to 512, tiled over every core
    (64, 512, 4, Rule.STREAM_LARGE_MATRIX),         # A of 128 KiB on one core: streamed by rows
])
def test_a_user_kernel_declaring_matmuls_map_pads_tiles_and_streams_like_matmul(on_emulator, m, k, n, rule):
    a = np.random.default_rng(2).standard_normal((m, k)).astype(np.float32)
    library, user = product_then_relu(MatMul, m, k, n), product_then_relu(Product, m, k, n)
    compiled = [g.compile(a=a, device=NPU2) for g in (library, user)]
    assert rule in dict(compiled[0].plan.rules)
    assert facts(compiled[1].plan) == facts(compiled[0].plan)
    np.testing.assert_allclose(compiled[1](a), library.reference(a), rtol=1e-4, atol=1e-4)


def test_a_row_reduction_of_one_input_compiles_and_runs(on_emulator):
    """A one-input kernel reducing each row ("rc->r") is a row reduction, placed like Max."""

    class Sums(iron.Graph):
        def body(self, m):
            return RowSums.step(m)

    m = np.arange(24, dtype=np.float32).reshape(4, 6)
    graph = Sums()
    compiled = graph.compile(m=((4, 6), np.float32), device=NPU2)
    assert compiled.plan.groups == (("g0", ("RowSums#0",)),)
    np.testing.assert_array_equal(compiled(m), m.sum(axis=1))
    np.testing.assert_array_equal(graph.reference(m), m.sum(axis=1))
