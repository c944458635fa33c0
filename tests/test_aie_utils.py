"""Tests of aie_utils: the device catalog figures, look-up by name and columns, the current device.

Does not test anything that uses a device (placement, compile, runtime).
"""

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

import aie_utils
from aie_utils import (
    Device,
    TileKind,
    UnknownDevice,
    devices,
    from_name,
    get_current_device,
    set_current_device,
    using_device,
)
from tests.quotes import quoted

REPO_ROOT = Path(__file__).resolve().parent.parent

ALL_NAMES = [
    "npu1", "npu1_1col", "npu1_2col", "npu1_3col",
    "npu2", "npu2_1col", "npu2_2col", "npu2_3col", "npu2_4col", "npu2_5col", "npu2_6col",
    "npu2_7col",
]  # fmt: skip

UNKNOWN_NPU3 = (
    "unknown device 'npu3': known devices are npu1, npu1_1col, npu1_2col, npu1_3col, npu2, "
    "npu2_1col, npu2_2col, npu2_3col, npu2_4col, npu2_5col, npu2_6col, npu2_7col. "
    "Pass one of these names to from_name()."
)


@pytest.fixture
def restore_current_device():
    previous = get_current_device()
    yield
    set_current_device(previous)


def run_fresh_python(code):
    """Run `code` in a new interpreter (so module state is untouched) and return its stdout."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return done.stdout.strip()


# --- per-tile figures -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["npu1", "npu2_3col"])
def test_compute_tile_figures(name):
    assert from_name(name).compute == TileKind(
        kind="compute",
        data_memory_bytes=65536,
        program_memory_bytes=16384,
        locks=16,
        dma_in_channels=2,
        dma_out_channels=2,
        buffer_descriptors=16,
        bd_dims=3,
        max_bd_wrap=255,
        max_bd_stride=8192,
        default_stack_bytes=1024,
    )


@pytest.mark.parametrize("name", ["npu1_2col", "npu2"])
def test_mem_tile_figures(name):
    assert from_name(name).mem == TileKind(
        kind="mem",
        data_memory_bytes=524288,
        program_memory_bytes=0,
        locks=64,
        dma_in_channels=6,
        dma_out_channels=6,
        buffer_descriptors=48,
        bd_dims=4,
        max_bd_wrap=1023,
        max_bd_stride=131072,
        default_stack_bytes=0,
    )


@pytest.mark.parametrize("name", ["npu1_1col", "npu2_7col"])
def test_shim_tile_figures(name):
    assert from_name(name).shim == TileKind(
        kind="shim",
        data_memory_bytes=0,
        program_memory_bytes=0,
        locks=16,
        dma_in_channels=2,
        dma_out_channels=2,
        buffer_descriptors=16,
        bd_dims=3,
        max_bd_wrap=1023,
        max_bd_stride=1048576,
        default_stack_bytes=0,
    )


# --- device figures ---------------------------------------------------------------------------


def test_npu1_figures():
    npu1 = from_name("npu1")
    assert (npu1.name, npu1.family, npu1.arch) == ("npu1", "npu1", "aie2")
    assert (npu1.n_cols, npu1.n_rows) == (4, 6)
    assert npu1.full_elf is False
    assert npu1.peano_target == "aie2-none-unknown-elf"
    assert npu1.clock_ghz == 1.6
    assert npu1.xrt_names == ("npu1", "Phoenix")
    assert (npu1.max_in_flight, npu1.dma_repeat_max, npu1.shim_bd_ids) == (4, 64, 16)


def test_npu2_figures():
    npu2 = from_name("npu2")
    assert (npu2.name, npu2.family, npu2.arch) == ("npu2", "npu2", "aie2p")
    assert (npu2.n_cols, npu2.n_rows) == (8, 6)
    assert npu2.full_elf is True
    assert npu2.peano_target == "aie2p-none-unknown-elf"
    assert npu2.clock_ghz == 1.8
    assert npu2.xrt_names == ("npu4", "npu5", "npu6")
    assert (npu2.max_in_flight, npu2.dma_repeat_max, npu2.shim_bd_ids) == (4, 64, 16)


def test_partitions_keep_their_family_figures():
    npu1_3col, npu2_5col = from_name("npu1_3col"), from_name("npu2_5col")
    assert (npu1_3col.family, npu1_3col.arch, npu1_3col.n_cols) == ("npu1", "aie2", 3)
    assert (npu1_3col.full_elf, npu1_3col.clock_ghz) == (False, 1.6)
    assert npu1_3col.peano_target == "aie2-none-unknown-elf"
    assert (npu2_5col.family, npu2_5col.arch, npu2_5col.n_cols) == ("npu2", "aie2p", 5)
    assert (npu2_5col.full_elf, npu2_5col.clock_ghz) == (True, 1.8)
    assert npu2_5col.xrt_names == ("npu4", "npu5", "npu6")


@pytest.mark.parametrize("name", ["npu1", "npu2_6col"])
def test_row_roles(name):
    device = from_name(name)
    assert (device.shim_row, device.mem_row, device.compute_rows) == (0, 1, (2, 3, 4, 5))


# --- tile coordinates -------------------------------------------------------------------------


def test_compute_tiles_are_column_major():
    assert from_name("npu1_2col").compute_tiles == [
        (0, 2), (0, 3), (0, 4), (0, 5),
        (1, 2), (1, 3), (1, 4), (1, 5),
    ]  # fmt: skip


@pytest.mark.parametrize(("name", "count"), [("npu1", 16), ("npu2", 32), ("npu2_3col", 12)])
def test_compute_tile_count(name, count):
    tiles = from_name(name).compute_tiles
    assert len(tiles) == count
    assert len(set(tiles)) == count
    assert tiles[-1] == (count // 4 - 1, 5)


def test_mem_and_shim_tiles():
    npu2_3col = from_name("npu2_3col")
    assert npu2_3col.mem_tiles == [(0, 1), (1, 1), (2, 1)]
    assert npu2_3col.shim_tiles == [(0, 0), (1, 0), (2, 0)]
    assert len(from_name("npu2").mem_tiles) == 8
    assert len(from_name("npu1").shim_tiles) == 4


def test_describe():
    assert from_name("npu1").describe() == (
        "npu1: AIE2 (npu1 family), 4 columns x 6 rows: 16 compute (64 KiB), 4 mem (512 KiB), "
        "4 shim; xclbin only (no full ELF); up to 1.6 GHz"
    )
    assert from_name("npu2_1col").describe() == (
        "npu2_1col: AIE2P (npu2 family), 1 column x 6 rows: 4 compute (64 KiB), 1 mem (512 KiB), "
        "1 shim; full ELF; up to 1.8 GHz"
    )


# --- catalog and look-up ----------------------------------------------------------------------


def test_devices_lists_the_catalog_in_order():
    assert [device.name for device in devices()] == ALL_NAMES
    assert devices() == devices()


@pytest.mark.parametrize("name", ALL_NAMES)
def test_from_name_returns_the_catalog_device(name):
    device = from_name(name)
    assert device.name == name
    assert device is devices()[ALL_NAMES.index(name)]


@pytest.mark.parametrize(("cols", "name"), [(1, "npu1_1col"), (2, "npu1_2col"), (3, "npu1_3col"),
                                            (4, "npu1")])  # fmt: skip
def test_npu1_columns_pick_a_partition(cols, name):
    assert from_name("npu1", n_cols=cols).name == name


@pytest.mark.parametrize("cols", range(1, 9))
def test_npu2_columns_pick_a_partition(cols):
    device = from_name("npu2", n_cols=cols)
    assert device.n_cols == cols
    assert device.name == ("npu2" if cols == 8 else f"npu2_{cols}col")


def test_partition_name_with_its_own_column_count():
    assert from_name("npu1_2col", n_cols=2) is from_name("npu1_2col")
    assert from_name("npu2_7col", n_cols=7).name == "npu2_7col"


def test_unknown_name():
    with pytest.raises(UnknownDevice) as caught:
        from_name("npu3")
    assert str(caught.value) == UNKNOWN_NPU3


def test_unknown_name_with_columns():
    with pytest.raises(UnknownDevice) as caught:
        from_name("npu3", n_cols=2)
    assert str(caught.value) == UNKNOWN_NPU3


def test_npu1_4col_does_not_exist():
    with pytest.raises(UnknownDevice) as caught:
        from_name("npu1_4col")
    assert str(caught.value).startswith("unknown device 'npu1_4col': known devices are npu1, ")


def test_name_that_is_not_a_string():
    with pytest.raises(UnknownDevice) as caught:
        from_name(2)
    assert str(caught.value).startswith("unknown device 2: known devices are npu1, ")


@pytest.mark.parametrize(
    ("name", "cols", "message"),
    [
        ("npu1", 6, "npu1 has 1 to 4 columns, not 6: pass n_cols between 1 and 4."),
        ("npu1", 0, "npu1 has 1 to 4 columns, not 0: pass n_cols between 1 and 4."),
        ("npu2", 9, "npu2 has 1 to 8 columns, not 9: pass n_cols between 1 and 8."),
        ("npu2", "2", "npu2 has 1 to 8 columns, not '2': pass n_cols between 1 and 8."),
        ("npu2", True, "npu2 has 1 to 8 columns, not True: pass n_cols between 1 and 8."),
        ("npu1_2col", 5, "npu1 has 1 to 4 columns, not 5: pass n_cols between 1 and 4."),
    ],
)
def test_bad_column_count(name, cols, message):
    with pytest.raises(UnknownDevice) as caught:
        from_name(name, n_cols=cols)
    assert str(caught.value) == message


def test_partition_name_with_another_column_count():
    with pytest.raises(UnknownDevice) as caught:
        from_name("npu1_2col", n_cols=3)
    quoted(caught.value, "npu1_2col", "not 3 columns", "from_name('npu1', n_cols=3)")


def test_unknown_device_is_a_value_error():
    with pytest.raises(ValueError):
        from_name("npu3")


# --- value semantics --------------------------------------------------------------------------


def test_devices_are_hashable_and_compare_by_value():
    assert len(set(devices())) == 12
    npu2 = from_name("npu2")
    copy = dataclasses.replace(npu2)
    assert copy == npu2 and hash(copy) == hash(npu2)
    assert {npu2: "strix"}[copy] == "strix"
    assert from_name("npu2_3col") != from_name("npu2_4col")
    assert from_name("npu1_3col") != from_name("npu2_3col")


def test_devices_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        from_name("npu2").n_cols = 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        from_name("npu2").compute.locks = 32


def test_repr_names_the_device():
    assert repr(from_name("npu2_3col")) == "<Device npu2_3col>"


# --- the current device -----------------------------------------------------------------------


def test_default_device_is_npu2_and_iron_is_not_imported():
    code = (
        "import sys, aie_utils; print(aie_utils.get_current_device().name, 'iron' in sys.modules)"
    )
    assert run_fresh_python(code) == "npu2 False"


@pytest.mark.usefixtures("restore_current_device")
def test_set_current_device_by_device_and_by_name():
    set_current_device(from_name("npu1_2col"))
    assert get_current_device() is from_name("npu1_2col")
    set_current_device("npu2_5col")
    assert get_current_device() is from_name("npu2_5col")


@pytest.mark.usefixtures("restore_current_device")
def test_set_current_device_accepts_a_device_outside_the_catalog():
    custom = dataclasses.replace(from_name("npu2"), name="npu2_custom", clock_ghz=1.5)
    set_current_device(custom)
    assert get_current_device() is custom


@pytest.mark.usefixtures("restore_current_device")
def test_set_current_device_rejects_other_types_and_keeps_the_current_device():
    set_current_device("npu1")
    with pytest.raises(UnknownDevice) as caught:
        set_current_device(3)
    quoted(caught.value, "set_current_device()", "not int 3", "from_name('npu2')")
    with pytest.raises(UnknownDevice) as caught:
        set_current_device("npu3")
    assert str(caught.value) == UNKNOWN_NPU3
    assert get_current_device().name == "npu1"


@pytest.mark.usefixtures("restore_current_device")
def test_using_device_restores_the_previous_device():
    set_current_device("npu1")
    with using_device("npu2_3col") as device:
        assert device is from_name("npu2_3col")
        assert get_current_device() is device
        with using_device(from_name("npu1_1col")):
            assert get_current_device().name == "npu1_1col"
        assert get_current_device().name == "npu2_3col"
    assert get_current_device().name == "npu1"


@pytest.mark.usefixtures("restore_current_device")
def test_using_device_restores_after_an_exception():
    set_current_device("npu1_3col")
    with pytest.raises(RuntimeError, match="inside the block"), using_device("npu2"):
        assert get_current_device().name == "npu2"
        raise RuntimeError("inside the block")
    assert get_current_device().name == "npu1_3col"


@pytest.mark.usefixtures("restore_current_device")
def test_using_device_with_a_bad_name_changes_nothing():
    set_current_device("npu1")
    with pytest.raises(UnknownDevice) as caught, using_device("npu3"):
        pytest.fail("the block must not run")
    assert str(caught.value) == UNKNOWN_NPU3
    assert get_current_device().name == "npu1"


def test_package_exports():
    assert aie_utils.__all__ == [
        "Device",
        "TileKind",
        "UnknownDevice",
        "devices",
        "from_name",
        "get_current_device",
        "set_current_device",
        "using_device",
    ]
    assert aie_utils.Device is Device
