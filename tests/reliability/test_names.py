"""Names are identifiers: a kernel's, graph's, state's or attribute path's name that could reach a
path, a C++ symbol or generated source is refused where it is declared, and no user kernel can
take a library kernel's name."""
import numpy as np
import pytest

import iron
from iron.errors import DeclarationError
from iron.kernels import Add, Copy
from tests.quotes import quoted

ALLOWED = ("C identifier", "64 characters")   # what a name must be, as every refusal of one says


def kernel_named(name):
    return type("UserKernel", (iron.Kernel,), {"name": name, "compute": staticmethod(lambda x: x)})


@pytest.mark.parametrize("name", ["../../../x", "/abs/x", 'x"\n#include "/etc/passwd', "add-one", "día", "9lives"])
def test_a_kernel_name_that_is_not_a_c_identifier_is_refused_when_the_class_is_defined(name, trail, unchanged):
    with unchanged(trail), pytest.raises(DeclarationError) as raised:
        kernel_named(name)
    quoted(raised.value, "'UserKernel'", repr(name), *ALLOWED, "Rename it")


@pytest.mark.parametrize("name", ["g2_norm", "emitter", "glu"])
def test_names_near_the_generated_ones_are_free(name):
    assert kernel_named(name).symbol(np.int32) == f"{name}_i32"


def test_an_unnamed_kernel_is_a_base_for_others_and_cannot_be_called(unchanged, trail):
    unnamed = kernel_named("")

    class Uses(iron.Graph):
        def body(self, x):
            return unnamed.step(x)

    with unchanged(trail), pytest.raises(iron.errors.KernelTypeError) as raised:
        Uses().reference(np.ones(4, np.int32))
    quoted(raised.value, "UserKernel", "name = '...'")


def test_a_300_character_kernel_name_is_refused_and_shown_short(trail, unchanged):
    with unchanged(trail), pytest.raises(DeclarationError) as raised:
        kernel_named("k" * 300)
    text = quoted(raised.value, "'UserKernel'", f"{'k' * 60!r}...", "300 characters", *ALLOWED)
    assert "k" * 61 not in text


def test_a_kernel_name_that_is_not_a_string_is_refused(trail, unchanged):
    with unchanged(trail), pytest.raises(DeclarationError) as raised:
        kernel_named(3)
    quoted(raised.value, "'UserKernel'", "3, a int", "string", *ALLOWED)


@pytest.mark.parametrize("name", ["emit", "g0", "g12_p1", "g0_block", "g3_p2_block"])
def test_a_kernel_cannot_take_the_name_of_a_function_iron_generates(name, trail, unchanged):
    with unchanged(trail), pytest.raises(DeclarationError) as raised:
        kernel_named(name)
    quoted(raised.value, "'UserKernel'", repr(name), "iron generates", "another name")


def test_a_user_kernel_named_add_is_refused_and_the_library_add_still_runs(trail, unchanged):
    class Doubles(iron.Graph):
        def body(self, x):
            return Add.step(x, x)

    x = np.arange(4, dtype=np.int32)
    with unchanged(trail), pytest.raises(DeclarationError) as raised:
        class Minus(iron.Kernel):
            name, arity = "add", 2

            @staticmethod
            def compute(a, b):
                return a - b
    quoted(raised.value, "Minus", "'add'", "iron.kernels.library.Add", "another name")
    np.testing.assert_array_equal(Doubles()(x), x + x)
    np.testing.assert_array_equal(Doubles().reference(x), x + x)


def test_a_subclass_of_a_library_kernel_needs_its_own_name(trail, unchanged):
    with unchanged(trail), pytest.raises(DeclarationError) as raised:
        class LoudAdd(Add):
            pass
    quoted(raised.value, "LoudAdd", "'add'", "name = '...'")


def test_two_user_kernels_cannot_share_a_name(trail, unchanged):
    first = type("First", (iron.Kernel,), {"name": "shared_name", "compute": staticmethod(lambda x: x)})
    with unchanged(trail), pytest.raises(DeclarationError) as raised:
        type("Second", (iron.Kernel,), {"name": "shared_name", "compute": staticmethod(lambda x: x)})
    quoted(raised.value, "Second", "'shared_name'", f"{first.__module__}.First", "another name")
    with pytest.raises(DeclarationError) as raised:
        type("Third", (iron.Kernel,), {"name": "shared_name", "compute": staticmethod(lambda x: x)})
    quoted(raised.value, "Third", f"{first.__module__}.First")


def defined_again(offset):
    """The same class (module and qualified name) defined again, as a re-run notebook cell does."""
    class PlusK(iron.Kernel):
        name = "plus_k_again"

        @staticmethod
        def compute(x):
            return x + np.int32(offset)
    return PlusK


def test_a_kernel_defined_again_replaces_itself_everywhere():
    defined_again(1)
    newest = defined_again(10)

    class Plus(iron.Graph):
        def body(self, x):
            return newest.step(x)

    x = np.arange(4, dtype=np.int32)
    np.testing.assert_array_equal(Plus().reference(x), x + 10)
    np.testing.assert_array_equal(Plus()(x), x + 10)


def test_a_user_kernel_source_is_written_under_its_derived_file_name():
    class Triple(iron.Kernel):
        name = "triple_it"
        source = 'extern "C" void triple_it_i32(const int32_t* x, int32_t* y, int32_t n) {}\n'

        @staticmethod
        def compute(x):
            return x * np.int32(3)

    class Uses(iron.Graph):
        def body(self, x):
            return Triple.step(x)

    compiled = Uses().compile(((8,), np.int32))
    assert sorted(compiled.sources) == ["g0.cc", "iron_kernel.h", "triple_it.cc"]
    assert '#include "triple_it.cc"' in compiled.sources["g0.cc"].splitlines()
    assert "triple_it_i32(" in compiled.sources["g0.cc"]


def test_a_graph_class_name_with_a_newline_is_refused(trail, unchanged):
    with unchanged(trail), pytest.raises(DeclarationError) as raised:
        type("Walk\n#include <evil>", (iron.Graph,), {"body": lambda self, x: Copy.step(x)})
    quoted(raised.value, "'Walk\\n#include <evil>'", *ALLOWED)


def test_a_graph_function_name_that_is_not_an_identifier_is_refused(trail, unchanged):
    def body(x):
        return Copy.step(x)
    body.__name__ = "a b"
    with unchanged(trail), pytest.raises(DeclarationError) as raised:
        iron.graph(body)
    quoted(raised.value, "@iron.graph", "'a b'", *ALLOWED)


@pytest.mark.parametrize("name", ["trail\n", "trailé", "t" * 65, "1st"])
def test_a_state_name_that_is_not_a_c_identifier_is_refused(name, trail, unchanged):
    with unchanged(trail), pytest.raises(DeclarationError) as raised:
        iron.state((4,), np.int32, name=name)
    quoted(raised.value, "iron.state(name=...)", repr(name), *ALLOWED)


def test_a_declaration_reached_through_a_dict_key_that_is_not_an_identifier_is_refused_at_trace(trail, unchanged):
    class Keyed(iron.Graph):
        def __init__(self):
            self.tables = {"a b": iron.weight(np.arange(4, dtype=np.int32))}

        def body(self, *, i: iron.Scratchpad[np.int32]):
            return Copy.step(self.tables["a b"][i])

    g = Keyed()
    with unchanged(trail, g), pytest.raises(DeclarationError) as raised:
        g.reference(i=1)
    quoted(raised.value, "<iron.weight (unnamed): (4,) int32>", "Keyed.body", "'tables.a b'", "C identifiers",
           "128 characters", "name=")


def test_attribute_paths_of_identifiers_and_indices_name_declarations():
    class Layers(iron.Graph):
        def __init__(self):
            self.layers = [{"w": iron.weight(np.arange(4, dtype=np.int32) * k)} for k in (1, 2)]

        def body(self, *, i: iron.Scratchpad[np.int32]):
            return Add.step(self.layers[0]["w"][i], self.layers[1]["w"][i])

    g = Layers()
    assert g.reference(i=3) == 9
    assert [d.name for d in g.trace().declarations] == ["layers.0.w", "layers.1.w"]
