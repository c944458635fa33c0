"""Contract tests of the XRT backend (iron/runtime/xrt.py).

These check the call sequence the backend makes against the documented pyxrt 2.25 contract
(docs/platform.md section 9, from XRT's pyxrt.cpp), through the stand-in fake_pyxrt that
enforces its rules and records every call; they do not touch hardware. The one test marked
`npu` opens a real NPU and is skipped where there is none.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import fake_pyxrt
import numpy as np
import pytest
from fake_pyxrt import ContractViolation

from iron.errors import (
    ArgumentError,
    BackendUnavailable,
    BuildError,
    DeviceTimeout,
    IndexOutOfRange,
    LoopError,
    PlacementError,
)
from iron.runtime.xrt import AddressPatch, XrtDesign, describe_npu, load_pyxrt, npu_present
from tests.quotes import quoted

# Header, one write op (3 words), one DDR address-patch op (6 words) whose offset (word 11) is 0x40.
INSTS = np.array([0x06030100, 0x104, 2, 52, 0x0, 0x1D004, 7, 0x81, 24, 0x1D204, 0, 0x40, 0],
                 dtype="<u4")
PATCH_WORD = 11
BUFFERS = [("x", 16), ("y", 16)]
TO, FROM = "XCL_BO_SYNC_BO_TO_DEVICE", "XCL_BO_SYNC_BO_FROM_DEVICE"


@dataclass
class Artifacts:
    image: str
    kernel_name: str
    xclbin: Path | None = None
    insts: Path | None = None
    elf: Path | None = None


@pytest.fixture
def xclbin_build(tmp_path):
    (tmp_path / "final.xclbin").write_bytes(b"xclbin")
    INSTS.tofile(tmp_path / "insts.bin")
    return Artifacts("xclbin", "MLIR_AIE", xclbin=tmp_path / "final.xclbin",
                     insts=tmp_path / "insts.bin")


@pytest.fixture
def elf_build(tmp_path):
    (tmp_path / "design.elf").write_bytes(b"\x7fELF")
    return Artifacts("elf", "main:sequence", elf=tmp_path / "design.elf")


def device_adds_one(first_data_arg):
    """A stand-in device: y = x + 1 over int32, x and y the run's first two host buffers."""
    def on_complete(run):
        x = np.frombuffer(run.args[first_data_arg].device_bytes, dtype=np.int32)
        run.args[first_data_arg + 1].device_bytes[:] = (x + 1).tobytes()
    return on_complete


def words_of(bo) -> list[int]:
    return np.frombuffer(bo.device_bytes, dtype="<u4").tolist()


# -- call sequences --------------------------------------------------------------------------


def test_xclbin_design_follows_the_documented_call_sequence(xclbin_build):
    fake = fake_pyxrt.new_pyxrt()
    fake.fake_state.on_complete = device_adds_one(3)
    design = XrtDesign("add_one", xclbin_build, BUFFERS, pyxrt=fake)
    design.write("x", np.arange(4, dtype=np.int32))
    run = design.make_run()
    design.start(run)
    design.wait(run)
    assert design.read("y", np.int32, (4,)).tolist() == [1, 2, 3, 4]
    assert fake.fake_state.calls == [
        "device(0) -> dev1",
        "xclbin('final.xclbin') -> xclbin1",
        "dev1.register_xclbin(xclbin1)",
        "hw_context(dev1, uuid1) -> ctx1",
        "kernel(ctx1, 'MLIR_AIE') -> kernel1",
        "kernel1.group_id(1) -> 11",
        "kernel1.group_id(3) -> 13",
        "bo(dev1, 16, host_only, 13) -> bo1",
        "kernel1.group_id(4) -> 14",
        "bo(dev1, 16, host_only, 14) -> bo2",
        "bo1.write(16 bytes at 0)",
        f"bo1.sync({TO})",
        "run(kernel1) -> run1",
        "bo(dev1, 52, cacheable, 11) -> bo3",
        "bo3.write(52 bytes at 0)",
        f"bo3.sync({TO})",
        "run1.set_arg(0, 3)",
        "run1.set_arg(1, bo3)",
        "run1.set_arg(2, 13)",
        "run1.set_arg(3, bo1)",
        "run1.set_arg(4, bo2)",
        "run1.start()",
        "run1.wait(2000) -> ERT_CMD_STATE_COMPLETED",
        f"bo2.sync({FROM})",
        "bo2.read(16 bytes at 0)",
    ]
    assert words_of(run.args[1]) == INSTS.tolist()


def test_full_elf_design_follows_the_documented_call_sequence(elf_build):
    fake = fake_pyxrt.new_pyxrt()
    fake.fake_state.on_complete = device_adds_one(0)
    design = XrtDesign("add_one", elf_build, BUFFERS, pyxrt=fake)
    design.write(0, np.array([10, 20, 30, 40], dtype=np.int32))
    run = design.make_run()
    design.start(run, words=[5, -1])
    design.wait(run)
    assert design.read(1, np.int32, (2, 2)).tolist() == [[11, 21], [31, 41]]
    assert fake.fake_state.calls == [
        "device(0) -> dev1",
        "elf('design.elf') -> elf1",
        "hw_context(dev1, elf1) -> ctx1",
        "ext.kernel(ctx1, 'main:sequence') -> kernel1",
        "bo(ctx1, 16, host_only, 0) -> bo1",
        "bo(ctx1, 16, host_only, 0) -> bo2",
        "bo1.write(16 bytes at 0)",
        f"bo1.sync({TO})",
        "run(kernel1) -> run1",
        "run1.get_ctrl_scratchpad_bo() -> bo3",
        "run1.set_arg(0, bo1)",
        "run1.set_arg(1, bo2)",
        "bo3.write(8 bytes at 0)",
        f"bo3.sync({TO})",
        "run1.start()",
        "run1.wait(2000) -> ERT_CMD_STATE_COMPLETED",
        f"bo2.sync({FROM})",
        "bo2.read(16 bytes at 0)",
    ]
    assert words_of(run.scratchpad)[:2] == [5, 0xFFFFFFFF]


# -- per-call words --------------------------------------------------------------------------


def test_patches_rewrite_each_runs_own_instruction_stream(xclbin_build):
    fake = fake_pyxrt.new_pyxrt()
    design = XrtDesign("trail", xclbin_build, BUFFERS, pyxrt=fake)
    patch = AddressPatch(insts_word=PATCH_WORD, word=1, byte_stride=256)
    first, second = design.make_run(), design.make_run()
    design.start(first, words=[9, 3], patches=[patch])
    design.start(second, words=[9, 7], patches=[patch])
    assert words_of(first.args[1])[PATCH_WORD] == 0x40 + 3 * 256
    assert words_of(second.args[1])[PATCH_WORD] == 0x40 + 7 * 256
    design.start(first, words=[9, 5], patches=[patch])
    assert words_of(first.args[1])[PATCH_WORD] == 0x40 + 5 * 256
    design.start(first)
    assert words_of(first.args[1]) == INSTS.tolist()
    assert fake.fake_state.calls[-4:] == [
        "run1.wait(2000) -> ERT_CMD_STATE_COMPLETED", "bo3.write(52 bytes at 0)",
        f"bo3.sync({TO})", "run1.start()",
    ]


def test_start_without_patches_leaves_the_built_stream_alone(xclbin_build):
    fake = fake_pyxrt.new_pyxrt()
    design = XrtDesign("add_one", xclbin_build, BUFFERS, pyxrt=fake)
    run = design.make_run()
    design.start(run, words=[1, 2])
    assert fake.fake_state.calls[-2:] == ["run1.set_arg(4, bo2)", "run1.start()"]


def test_patch_outside_a_ddr_patch_op_is_refused_before_anything_starts(xclbin_build):
    fake = fake_pyxrt.new_pyxrt()
    design = XrtDesign("trail", xclbin_build, BUFFERS, pyxrt=fake)
    run = design.make_run()
    with pytest.raises(BuildError) as caught:
        design.start(run, words=[1], patches=[AddressPatch(5, 0, 64)])
    quoted(caught.value, "'trail'", "instruction word 5", "0x81", "13-word", "rebuild")
    assert "run1.start()" not in fake.fake_state.calls


def test_patch_past_32_bits_is_refused(xclbin_build):
    design = XrtDesign("trail", xclbin_build, BUFFERS, pyxrt=fake_pyxrt.new_pyxrt())
    with pytest.raises(IndexOutOfRange) as caught:
        design.start(design.make_run(), words=[0, 2**24],
                     patches=[AddressPatch(PATCH_WORD, 1, 256)])
    quoted(caught.value, "word 1", "'trail'", "16777216", "256 bytes", "instruction word 11", "4294967360", "32 bits")


def test_patch_needs_its_word(xclbin_build):
    design = XrtDesign("trail", xclbin_build, BUFFERS, pyxrt=fake_pyxrt.new_pyxrt())
    with pytest.raises(ArgumentError) as caught:
        design.start(design.make_run(), words=[4], patches=[AddressPatch(PATCH_WORD, 1, 256)])
    quoted(caught.value, "instruction word 11", "'trail'", "per-call word 1", "1 words were given")


@pytest.mark.parametrize("words, patches, message", [
    ([1, 2, 3], None, ("'step'", "3 per-call words (12 bytes)", "8 bytes", "at most 2 words")),
    ([1, 2**32], None, ("word 1", "'step'", "4294967296", "32 bits", "-2147483648 to 4294967295")),
    ([1], [AddressPatch(PATCH_WORD, 0, 4)], ("'step'", "full ELF", "address patches", "xclbin")),
])
def test_bad_scratchpad_words_are_refused_before_the_start(elf_build, words, patches, message):
    fake = fake_pyxrt.new_pyxrt(scratchpad_bytes=8)
    design = XrtDesign("step", elf_build, BUFFERS, pyxrt=fake)
    run = design.make_run()
    with pytest.raises(ArgumentError) as caught:
        design.start(run, words=words, patches=patches)
    quoted(caught.value, *message)
    assert fake.fake_state.calls[-1] == "run1.set_arg(1, bo2)"


# -- runs in flight --------------------------------------------------------------------------


def test_a_fifth_start_waits_the_oldest_run_first(xclbin_build):
    fake = fake_pyxrt.new_pyxrt()
    design = XrtDesign("add_one", xclbin_build, BUFFERS, pyxrt=fake)
    runs = [design.make_run() for _ in range(5)]
    for run in runs[:4]:
        design.start(run)
    marker = len(fake.fake_state.calls)
    design.start(runs[4])
    design.wait(runs[0])
    design.start(runs[1])
    assert fake.fake_state.calls[marker:] == [
        "run1.wait(2000) -> ERT_CMD_STATE_COMPLETED", "run5.start()",
        "run2.wait(2000) -> ERT_CMD_STATE_COMPLETED", "run2.start()",
    ]


@pytest.mark.parametrize("state, name", [(8, "ERT_CMD_STATE_TIMEOUT"), (5, "ERT_CMD_STATE_ERROR")])
def test_a_run_that_does_not_complete_raises_device_timeout(xclbin_build, state, name):
    design = XrtDesign("mismatch", xclbin_build, BUFFERS,
                       pyxrt=fake_pyxrt.new_pyxrt(wait_state=state))
    run = design.make_run()
    design.start(run)
    with pytest.raises(DeviceTimeout) as caught:
        design.wait(run, timeout_ms=500)
    quoted(caught.value, "'mismatch'", "run.wait(500)", name, f"XRT state {state}", "IRON_BACKEND=emulator",
           "DeviceHang")


def test_a_ring_binds_each_runs_feedback_to_the_next_runs_scratchpad(elf_build):
    fake = fake_pyxrt.new_pyxrt()
    design = XrtDesign("count", elf_build, BUFFERS + [("next", 64)], pyxrt=fake)
    marker = len(fake.fake_state.calls)
    ring = design.make_ring(3, feedback_arg=2)
    assert fake.fake_state.calls[marker:] == [
        "run(kernel1) -> run1", "run(kernel1) -> run2", "run(kernel1) -> run3",
        "run1.get_ctrl_scratchpad_bo() -> bo4", "run2.get_ctrl_scratchpad_bo() -> bo5",
        "run3.get_ctrl_scratchpad_bo() -> bo6",
        "run1.set_arg(0, bo1)", "run1.set_arg(1, bo2)", "run1.set_arg(2, bo5)",
        "run2.set_arg(0, bo1)", "run2.set_arg(1, bo2)", "run2.set_arg(2, bo6)",
        "run3.set_arg(0, bo1)", "run3.set_arg(1, bo2)", "run3.set_arg(2, bo4)",
    ]

    def emit(run):  # the stand-in Emit step: next run's word 0 = this run's word 0 + 1
        step = np.frombuffer(run.scratchpad.device_bytes, dtype="<u4")[0]
        run.args[2].device_bytes[:4] = np.array([step + 1], dtype="<u4").tobytes()

    fake.fake_state.on_complete = emit
    design.start(ring[0], words=[10])
    for previous, run in [(ring[0], ring[1]), (ring[1], ring[2]), (ring[2], ring[0])]:
        design.wait(previous)
        design.start(run)
    design.wait(ring[0])
    assert design.read_words(ring[1], 1).tolist() == [14]
    assert sum(call.endswith(".write(4 bytes at 0)") for call in fake.fake_state.calls) == 1


@pytest.mark.parametrize("depth, feedback_arg, message", [
    (0, 1, ("'count'", "at least 1 run", "depth 0")),
    (2, 2, ("'count'", "host buffer 2", "2 (x, y)")),
])
def test_bad_rings_are_refused(elf_build, depth, feedback_arg, message):
    design = XrtDesign("count", elf_build, BUFFERS, pyxrt=fake_pyxrt.new_pyxrt())
    with pytest.raises(LoopError) as caught:
        design.make_ring(depth, feedback_arg)
    quoted(caught.value, *message)


def test_a_ring_needs_a_full_elf(xclbin_build):
    design = XrtDesign("count", xclbin_build, BUFFERS, pyxrt=fake_pyxrt.new_pyxrt())
    with pytest.raises(LoopError) as caught:
        design.make_ring(2, 1)
    quoted(caught.value, "full ELF (npu2)", "'count'", "xclbin")


# -- refusals when loading and calling -------------------------------------------------------


def test_missing_pyxrt_says_how_to_install_it(xclbin_build, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyxrt", None)
    with pytest.raises(BackendUnavailable) as caught:
        XrtDesign("add_one", xclbin_build, BUFFERS)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    quoted(caught.value, "pyxrt", f"Python {version}", "import of pyxrt halted; None in sys.modules",
           "apt install python3-xrt libxrt-npu2 libxrt-utils-npu", "--system-site-packages", "IRON_BACKEND=emulator")


def test_missing_device_names_the_fix(xclbin_build):
    with pytest.raises(BackendUnavailable) as caught:
        XrtDesign("add_one", xclbin_build, BUFFERS, pyxrt=fake_pyxrt.new_pyxrt(devices=0))
    quoted(caught.value, "'add_one'", "pyxrt.device(0)", "No such device with index '0'", "amdxdna",
           "/dev/accel/accel0", "xrt-smi examine", "IRON_BACKEND=emulator")


def test_more_host_buffers_than_the_xclbin_kernel_takes_are_refused(xclbin_build):
    fake = fake_pyxrt.new_pyxrt(xclbin_num_args=5)
    with pytest.raises(PlacementError) as caught:
        XrtDesign("wide", xclbin_build, [("a", 4), ("b", 4), ("c", 4)], pyxrt=fake)
    quoted(caught.value, "'wide'", "3 host buffers (a, b, c)", "MLIR_AIE", "final.xclbin", "at most 2",
           "get_num_args() 5", "July 2026")
    assert fake.fake_state.calls == ["device(0) -> dev1", "xclbin('final.xclbin') -> xclbin1"]


def test_missing_artifact_is_refused_before_the_device_opens(xclbin_build):
    xclbin_build.insts.unlink()
    fake = fake_pyxrt.new_pyxrt()
    with pytest.raises(BuildError) as caught:
        XrtDesign("add_one", xclbin_build, BUFFERS, pyxrt=fake)
    quoted(caught.value, "'add_one'", str(xclbin_build.insts), "Rebuild")
    assert fake.fake_state.calls == []


@pytest.mark.parametrize("call, message", [
    (lambda design: design.write("z", np.zeros(4, np.int32)),
     ("Design 'add_one' has no host buffer 'z'; its host buffers are x, y. Pass one of those "
      "names or an index from 0 to 1.")),
    (lambda design: design.write("x", np.zeros(5, np.int32)),
     ("Host buffer 'x' of design 'add_one' holds 16 bytes, but the array given has 20 bytes "
      "(int32, shape (5,)). Pass an array of at most 16 bytes.")),
    (lambda design: design.read(1, np.float64, (4,)),
     ("Host buffer 'y' of design 'add_one' holds 16 bytes, but reading float64 of shape (4,) "
      "needs 32. Read at most 16 bytes.")),
    (lambda design: design.start(object()),
     ("That run was not made by design 'add_one'. Start and wait only runs returned by its "
      "make_run() or make_ring().")),
])
def test_bad_host_calls_are_refused(xclbin_build, call, message):
    design = XrtDesign("add_one", xclbin_build, BUFFERS, pyxrt=fake_pyxrt.new_pyxrt())
    with pytest.raises(ArgumentError, match=re.escape(message) + "$"):
        call(design)


# -- NPU detection ---------------------------------------------------------------------------


def make_tree(root: Path, vbnv: str | None) -> None:
    (root / "dev" / "accel").mkdir(parents=True)
    (root / "dev" / "accel" / "accel0").touch()
    device = root / "sys" / "class" / "accel" / "accel0" / "device"
    device.mkdir(parents=True)
    if vbnv is not None:
        (device / "vbnv").write_text(vbnv)


@pytest.mark.parametrize("vbnv, expected", [("RyzenAI-npu4\n", "RyzenAI-npu4"), (None, None)])
def test_npu_detection_reads_dev_and_sys(tmp_path, vbnv, expected):
    make_tree(tmp_path, vbnv)
    roots = {"dev_root": tmp_path / "dev", "sys_root": tmp_path / "sys"}
    assert describe_npu(**roots) == expected
    assert npu_present(**roots) is (expected is not None)


def test_no_accel_node_means_no_npu(tmp_path):
    assert describe_npu(tmp_path / "dev", tmp_path / "sys") is None
    assert npu_present(tmp_path / "dev", tmp_path / "sys") is False


# -- the stand-in enforces the documented rules ----------------------------------------------


def xclbin_run(fake, build):
    device = fake.device(0)
    xclbin = fake.xclbin(str(build.xclbin))
    device.register_xclbin(xclbin)
    kernel = fake.kernel(fake.hw_context(device, xclbin.get_uuid()), "MLIR_AIE")
    insts = fake.bo(device, 52, fake.bo.cacheable, kernel.group_id(1))
    data = fake.bo(device, 16, fake.bo.host_only, kernel.group_id(3))
    run = fake.run(kernel)
    for index, value in enumerate([3, insts, 13, data]):
        run.set_arg(index, value)
    return kernel, data, run


def restart(fake, build):
    run = xclbin_run(fake, build)[2]
    run.start()
    run.start()


def start_five(fake, build):
    kernel, _, first = xclbin_run(fake, build)
    for _ in range(5):
        run = fake.run(kernel)
        for index, value in first.args.items():
            run.set_arg(index, value)
        run.start()


def elf_group_id(fake, build):
    fake.ext.kernel(fake.hw_context(fake.device(0), fake.elf(str(build.xclbin))),
                    "main:sequence").group_id(3)


def read_stale(fake, build):
    _, data, run = xclbin_run(fake, build)
    run.start()
    run.wait(10)
    data.read(16, 0)


def start_unsynced(fake, build):
    _, data, run = xclbin_run(fake, build)
    data.write(np.zeros(16, np.uint8), 0)
    run.start()


@pytest.mark.parametrize("misuse, error, text", [
    (lambda fake, build: fake.XCL_BO_SYNC_BO_TO_DEVICE, AttributeError,
     "use pyxrt.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE"),
    (lambda fake, build: fake.ert_cmd_state.ERT_CMD_STATE_COMPLETED == 4, ContractViolation,
     "not IntEnum"),
    (lambda fake, build: fake.bo(fake.device(0), 16, fake.bo.device_only, 0), ContractViolation,
     "only host_only (data) and cacheable"),
    (lambda fake, build: fake.bo.host_only | fake.bo.cacheable, TypeError, "unsupported operand"),
    (lambda fake, build: fake.device(), ContractViolation, "empty handle"),
    (lambda fake, build: fake.run(), ContractViolation, "empty handle"),
    (lambda fake, build: xclbin_run(fake, build)[0](3), ContractViolation, "run.set_arg"),
    (elf_group_id, ContractViolation, "never call group_id()"),
    (restart, RuntimeError, "bad command state"),
    (start_five, ContractViolation, "4 runs are already in flight"),
    (read_stale, ContractViolation, "before sync(XCL_BO_SYNC_BO_FROM_DEVICE)"),
    (start_unsynced, ContractViolation, "written but not synced"),
    (lambda fake, build: xclbin_run(fake, build)[2].wait(), ContractViolation, "run.wait(ms)"),
    (lambda fake, build: fake.xclbin("/nonexistent"), RuntimeError, "No such file '/nonexistent'"),
])
def test_the_stand_in_enforces_the_documented_rules(xclbin_build, misuse, error, text):
    with pytest.raises(error, match=re.escape(text)):
        misuse(fake_pyxrt.new_pyxrt(), xclbin_build)


def test_the_stand_in_enums_compare_through_int():
    fake = fake_pyxrt.new_pyxrt()
    completed = fake.ert_cmd_state.ERT_CMD_STATE_COMPLETED
    assert int(completed) == 4
    assert fake.ert_cmd_state(4) == completed
    assert not hasattr(fake, "ERT_CMD_STATE_COMPLETED")


# -- a real NPU ------------------------------------------------------------------------------


@pytest.mark.npu
def test_a_real_npu_opens():
    if not npu_present():
        pytest.skip("no Ryzen AI NPU here: no /dev/accel/accel* with a "
                    "/sys/class/accel/*/device/vbnv")
    try:
        pyxrt = load_pyxrt()
    except BackendUnavailable as exc:
        pytest.skip(f"an NPU is present but its toolchain is not: {exc}")
    assert describe_npu().startswith("RyzenAI-npu")
    assert pyxrt.enumerate_devices() >= 1
    assert pyxrt.device(0).get_info(pyxrt.xrt_info_device.name) != ""
