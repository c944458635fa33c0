"""Environment settings that gave raw errors (issue 12) now give named ones, before anything is
built or cached: a $CXX a shell could not split, and IRON_BACKEND=xrt on a machine without an NPU
(or without pyxrt)."""
import sys

import numpy as np
import pytest

import iron
from iron.errors import BackendUnavailable, ToolchainMissing
from iron.models.designs import Walk
from iron.runtime import backend
from iron.runtime.emulator.native import NativeLibrary
from iron.runtime.xrt import load_pyxrt

TINY = {"tiny.cc": 'extern "C" void tiny(int* out) { *out = 1; }\n'}


def test_cxx_with_an_unbalanced_quote_is_a_named_error(tmp_path, monkeypatch):
    monkeypatch.setenv("IRON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CXX", "g++ '-O2")
    with pytest.raises(ToolchainMissing) as raised:
        NativeLibrary.load(TINY)
    assert str(raised.value) == (
        "CXX=\"g++ '-O2\" cannot be split into a command as a shell would (No closing quotation), "
        "so the emulator's native kernel mode cannot run the host C++ compiler. Balance the "
        "quotes in $CXX (for example CXX=\"ccache g++\"), or unset it to use g++."
    )
    assert not (tmp_path / "cache").exists()


@pytest.fixture
def forced_xrt(tmp_path, monkeypatch):
    monkeypatch.setattr(backend, "_announced", set())
    monkeypatch.setenv("IRON_BACKEND", "xrt")
    monkeypatch.setenv("IRON_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


NO_NPU = (
    "IRON_BACKEND=xrt asks for an NPU, but this machine shows none: no /dev/accel/accel* node has "
    "a Ryzen AI NPU behind it (its /sys/class/accel/<node>/device/vbnv). The NPU needs the "
    "amdxdna kernel driver: check with `ls /dev/accel` and `xrt-smi examine` (which lists the "
    "NPU), load the driver with `sudo modprobe amdxdna`, or set IRON_BACKEND=emulator to run on "
    "the emulator."
)


def test_iron_backend_xrt_without_an_npu_says_there_is_none(forced_xrt, monkeypatch, capsys):
    monkeypatch.setattr("iron.runtime.xrt.describe_npu", lambda: None)
    with pytest.raises(BackendUnavailable) as raised:
        backend.select_backend()
    assert str(raised.value) == NO_NPU
    assert capsys.readouterr().err == ""


def test_a_call_with_iron_backend_xrt_and_no_npu_fails_before_building(forced_xrt, monkeypatch):
    monkeypatch.setattr("iron.runtime.xrt.describe_npu", lambda: None)
    walk = Walk(np.arange(1, 9, dtype=np.int32) % 8, 4)
    body = walk.compile(device="npu2")
    with pytest.raises(BackendUnavailable) as raised:
        body(**iron.Carry(node=0, steps=0))
    assert str(raised.value) == NO_NPU
    assert body.artifacts is None
    assert not forced_xrt.exists()


def test_iron_backend_xrt_with_an_npu_but_no_pyxrt_says_so(forced_xrt, monkeypatch):
    monkeypatch.setattr("iron.runtime.xrt.describe_npu", lambda: "RyzenAI-npu4")
    monkeypatch.setitem(sys.modules, "pyxrt", None)
    with pytest.raises(BackendUnavailable) as raised:
        backend.select_backend()
    with pytest.raises(BackendUnavailable) as direct:
        load_pyxrt()
    assert str(raised.value) == str(direct.value)
    assert str(raised.value).startswith("iron's XRT backend needs pyxrt, XRT's Python binding")
