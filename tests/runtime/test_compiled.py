"""CompiledGraph: what compile() makes, its cache, and data vs design."""
import numpy as np
import pytest

import aie_utils
import iron
from iron.errors import ArgumentError, ToolchainMissing
from iron.kernels import MatVec
from iron.models.designs import MLP, Walk
from iron.plan.plan import WordKind
from tests.quotes import quoted


@pytest.fixture(autouse=True)
def emulator(monkeypatch):
    monkeypatch.setenv("IRON_BACKEND", "emulator")
    monkeypatch.setenv("IRON_QUIET", "1")


class Project(iron.Graph):
    def __init__(self, w):
        self.w = iron.param(w)

    def body(self, x):
        return MatVec.step(self.w, x)


def test_compiling_again_is_served_from_memory_per_shapes_and_device():
    g = MLP(32, 2)
    a = g.compile(x=((32,), np.float32))
    assert g.compile(x=((32,), np.float32)) is a
    assert g.compile(x=((32,), np.float32), device="npu2") is a
    assert g.compile(x=((32,), np.float32), device="npu1") is not a
    assert g.compile(x=((32,), np.float32), device="npu1").plan.device.name == "npu1"


def test_new_weight_values_change_the_data_not_the_design():
    rng = np.random.default_rng(0)
    w1, w2 = (rng.standard_normal((16, 16)).astype(np.float32) for _ in range(2))
    a, b = Project(w1).compile(x=((16,), np.float32)), Project(w2).compile(x=((16,), np.float32))
    assert a.mlir == b.mlir and a.sources == b.sources
    x = rng.standard_normal(16).astype(np.float32)
    np.testing.assert_allclose(a(x), w1 @ x, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(b(x), w2 @ x, rtol=1e-5, atol=1e-5)


def test_what_compile_makes_before_any_build():
    walk = Walk(np.arange(8, dtype=np.int32)[::-1].copy(), 9)
    with aie_utils.using_device("npu2"):
        c = walk.compile()
    assert c.artifacts is None
    assert c.plan.device.name == "npu2" and c.plan.full_elf is True and c.plan.image == "elf"
    assert [(w.name, w.kind) for w in c.parameters] == [("node", WordKind.CARRIED), ("steps", WordKind.CARRIED),
                                                         ("node", WordKind.DMA), ("steps", WordKind.DMA),
                                                         ("steps", WordKind.DMA), ("steps + 1", WordKind.NEXT)]
    assert c.mlir.startswith("module {\n  aie.device(npu2) {")
    assert {"g0.cc", "emit.cc", "copy.cc", "iron_kernel.h"} <= set(c.sources)
    assert c.describe().splitlines()[0] == "Walk on npu2: full ELF (image 'elf')"


def test_build_without_the_toolchain_names_what_is_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("PEANO_INSTALL_DIR", raising=False)
    monkeypatch.delenv("MLIR_AIE_INSTALL_DIR", raising=False)
    monkeypatch.setattr("iron.toolchain.build.sys.executable", str(tmp_path / "python"), raising=False)
    c = Walk(np.arange(4, dtype=np.int32), 5).compile()
    with pytest.raises(ToolchainMissing) as e:
        c.build()
    assert "aiecc" in str(e.value) and "Peano" in str(e.value)
    assert c.artifacts is None


def test_a_compiled_version_refuses_other_shapes_and_missing_tensors():
    g = MLP(16, 1)
    c = g.compile(x=((16,), np.float32))
    with pytest.raises(ArgumentError) as e:
        c(np.ones(8, np.float32))
    quoted(e.value, "tensor 'x' of MLP.body", "(8,) float32", "(16,) float32")
    with pytest.raises(ArgumentError) as e:
        c()
    quoted(e.value, "MLP.body", "missing tensor 'x'", "x=array")


def test_iron_debug_prints_the_plan_and_each_emulator_call(monkeypatch, capsys):
    monkeypatch.setenv("IRON_DEBUG", "1")
    c = Walk(np.arange(4, dtype=np.int32), 5).compile()
    c(node=1, steps=0)
    err = capsys.readouterr().err
    assert err.startswith("iron: compiled Walk for npu2:\nWalk on npu2: full ELF (image 'elf')\n")
    assert err.endswith("iron: emulator: call Walk with words [1, 0, 1, 0, 0, 1, 0]\n")   # and the flag
    monkeypatch.setenv("IRON_DEBUG", "0")
    c(node=2, steps=1)
    assert capsys.readouterr().err == ""


def test_an_unknown_device_is_the_catalogs_error_raised_as_irons_with_the_same_text():
    walk = Walk(np.array([1, 0], np.int32), 2)
    with pytest.raises(iron.errors.UnknownDevice) as caught:
        walk.compile(device="npu3")
    quoted(caught.value, "'npu3'", "npu1, npu1_1col, npu1_2col, npu1_3col, npu2, npu2_1col, npu2_2col, npu2_3col, "
           "npu2_4col, npu2_5col, npu2_6col, npu2_7col", "from_name()")
    with pytest.raises(aie_utils.UnknownDevice) as catalog:
        aie_utils.from_name("npu3")
    assert str(caught.value) == str(catalog.value)   # the catalog's own text
    assert isinstance(caught.value, aie_utils.UnknownDevice) and isinstance(caught.value, iron.errors.IronError)
