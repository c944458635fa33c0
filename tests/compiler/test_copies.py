"""`copy_view_for_grid` (iron/compiler/copies.py), on the Program before fusion: a view of a host
tensor a tiled MatMul (or an elementwise call beside one) reads goes through a Copy inserted
before it; a view no DMA moves in whole words goes through a Strided call gathering it by its
access pattern in elements; a view of a computed result picking more runs than a core copies
goes through a Strided call when the result fits a tile, through a Copy when it crosses in DDR.
Inserted calls are listed in `Program.inserted`, labelled after the body's own, and each is one
`Rule.COPY_VIEW_FOR_GRID` line. `carry_from_earlier_segment` appends a Copy group of its own.
The pass refuses nothing: a view it cannot copy is left to the passes after it."""
import numpy as np

import iron
from iron.compiler.copies import carry_from_earlier_segment, copy_view_for_grid, copy_view_rules
from iron.compiler.fuse import Group
from iron.ir import Op
from iron.kernels import Add, Copy, Exp, MatMul
from iron.kernels.registry import strided_kernel
from iron.plan.rules import Rule
from tests.compiler import designs

F32 = np.float32


class ProductOfRows(iron.Graph):
    """a[1:] @ b, then `then`: the product alone, or Exp of it, or the product plus a[1:]."""

    def __init__(self, n: int, then: str = ""):
        self.b = iron.param(np.ones((n, n), F32))
        self.then = then

    def body(self, a):
        product = MatMul.step(a[1:], self.b)
        if self.then == "exp":
            return Exp.step(product)
        return Add.step(product, a[1:]) if self.then == "add" else product


class Narrow(iron.Graph):
    def body(self, x, y):
        return Add.step(x.T, y[:, ::2])


class StepOfProduct(iron.Graph):
    """y[:, ::2] + c for a product y of (n, 2n)."""

    def __init__(self, n: int):
        self.w = iron.param(np.ones((n, 2 * n), F32))

    def body(self, a, c):
        return Add.step(MatMul.step(a, self.w)[:, ::2], c)


def kernels(program) -> list:
    return [c.arg.kernel for c in program.calls]


def test_a_program_without_views_comes_back_unchanged():
    program = designs.trace(designs.mlp_layer())
    assert copy_view_for_grid(program) is program


def test_a_small_matmul_reads_its_view_itself():
    program = ProductOfRows(16).trace(a=((17, 16), F32))
    assert copy_view_for_grid(program) is program


def test_a_tiled_matmul_reads_a_copy_of_its_view_whoever_reads_its_product():
    """a[1:] (512 rows of 512) read by the tiled MatMul: a Copy inserted first, labelled after the
    body's calls (Copy#2); Exp over the product reads the product itself."""
    program = copy_view_for_grid(ProductOfRows(512, "exp").trace(a=((513, 512), F32)))
    copy, product, exp = program.calls
    assert kernels(program) == [Copy, MatMul, Exp] and program.inserted == (copy,)
    assert copy.src[0].op == Op.VIEW and copy.shape == (512, 512) and program.call_index[copy] == 2
    assert product.src[0] is copy and exp.src[0] is product and program.outputs == (exp,)
    assert [rule for rule, _ in copy_view_rules(program)] == [Rule.COPY_VIEW_FOR_GRID]


def test_an_elementwise_call_beside_a_grid_reads_its_own_copy_inserted_before_it():
    """product + a[1:]: the Add reads the grid's product laid out as the grid computes it, so its
    view (traced again: another view node) is copied too, right before the Add."""
    program = copy_view_for_grid(ProductOfRows(512, "add").trace(a=((513, 512), F32)))
    first, product, second, add = program.calls
    assert kernels(program) == [Copy, MatMul, Copy, Add] and program.inserted == (first, second)
    assert product.src[0] is first and add.src[:2] == (product, second)
    assert [program.call_index[c] for c in program.calls] == [2, 0, 3, 1]
    assert [rule for rule, _ in copy_view_rules(program)] == [Rule.COPY_VIEW_FOR_GRID] * 2


def test_views_of_two_byte_elements_are_gathered_by_strided_calls():
    """x.T and y[:, ::2] of bfloat16: each a Strided call over the whole tensor, its access pattern
    (offset, four sizes and strides in elements, the innermost last) as static attributes."""
    program = copy_view_for_grid(Narrow().trace(x=((32, 16), iron.bfloat16), y=((16, 64), iron.bfloat16)))
    x_t, y_step, add = program.calls
    assert kernels(program) == [strided_kernel(), strided_kernel(), Add]
    assert program.inserted == (x_t, y_step) and add.src[:2] == (x_t, y_step)
    assert [c.src[0] for c in (x_t, y_step)] == list(program.inputs)
    assert x_t.arg.attr_dict == {"shape": (16, 32), "offset": 0, "n0": 1, "s0": 0, "n1": 1, "s1": 0,
                                 "n2": 16, "s2": 1, "n3": 32, "s3": 16}
    assert y_step.arg.attr_dict == {"shape": (16, 32), "offset": 0, "n0": 1, "s0": 0, "n1": 1, "s1": 0,
                                    "n2": 1, "s2": 0, "n3": 512, "s3": 2}
    assert [rule for rule, _ in copy_view_rules(program)] == [Rule.COPY_VIEW_FOR_GRID] * 2


def test_a_step_view_of_a_product_is_gathered_on_a_core_or_copied_from_ddr_by_its_size():
    """y[:, ::2] picks one run per element (more than MAX_GATHER_RUNS): a Strided call when y fits
    a tile (64 x 128 float32), a Copy when it is larger and crosses in DDR (256 x 512)."""
    small = copy_view_for_grid(StepOfProduct(64).trace(a=((64, 64), F32), c=((64, 64), F32)))
    assert kernels(small) == [MatMul, strided_kernel(), Add]
    large = copy_view_for_grid(StepOfProduct(256).trace(a=((256, 256), F32), c=((256, 256), F32)))
    assert kernels(large) == [MatMul, Copy, Add]
    product, copy, add = large.calls
    assert copy.src[0].op == Op.VIEW and copy.src[0].src[0] is product and add.src[0] is copy


def test_a_carried_element_an_earlier_segment_made_is_copied_in_a_group_of_its_own():
    """The Walk's next node, made by its first Copy: as if that call ran in an earlier segment,
    the last segment gets a Copy of it (group g1), the carried node reads that Copy, and the group
    before it is closed by `Rule.CARRY_FROM_EARLIER_SEGMENT`."""
    program = designs.trace(designs.walk(8))
    made, write = program.calls
    assert dict(program.carry)["node"].src[0] is made
    groups = (Group("g0", program.calls, None),)
    last, after = carry_from_earlier_segment(program, groups, [made], "g1")
    (copy,) = last.inserted
    assert last.calls == (made, write, copy) and copy.arg.kernel is Copy and copy.src[0] is made
    assert dict(last.carry)["node"].src[0] is copy and dict(last.carry)["steps"] is dict(program.carry)["steps"]
    assert [(g.name, g.calls, g.closed_by) for g in after] == [
        ("g0", program.calls, Rule.CARRY_FROM_EARLIER_SEGMENT), ("g1", (copy,), None)]
    assert carry_from_earlier_segment(program, groups, [], "g1") == (program, groups)
