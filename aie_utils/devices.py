"""The NPU device catalog and the current device: every `aie.device(...)` target iron builds for
(npu1 and its 1-3 column partitions, npu2 and its 1-7 column partitions) as a frozen `Device` with
its tiles' resources, looked up by name and column count, and the device `compile()` builds for
(npu2 until set). The figures are those of docs/platform.md (sections 1, 2 and 5); callers decide
what fits. It imports nothing from iron, and raises its own `UnknownDevice`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

KIB = 1024


class UnknownDevice(ValueError):
    """A device name or column count that is not in the catalog (iron.errors.UnknownDevice, which
    iron raises, derives from it)."""


@dataclass(frozen=True)
class TileKind:
    """The resources of one tile of a kind (compute, mem or shim)."""

    kind: str
    data_memory_bytes: int
    program_memory_bytes: int
    locks: int
    dma_in_channels: int  # S2MM: stream to memory
    dma_out_channels: int  # MM2S: memory to stream
    buffer_descriptors: int
    bd_dims: int
    max_bd_wrap: int  # largest size of one BD dimension, in 32-bit words
    max_bd_stride: int  # largest stride of one BD dimension, in 32-bit words
    default_stack_bytes: int


COMPUTE_TILE = TileKind(
    kind="compute",
    data_memory_bytes=64 * KIB,
    program_memory_bytes=16 * KIB,
    locks=16,
    dma_in_channels=2,
    dma_out_channels=2,
    buffer_descriptors=16,
    bd_dims=3,
    max_bd_wrap=255,
    max_bd_stride=2**13,
    default_stack_bytes=1 * KIB,
)
MEM_TILE = TileKind(
    kind="mem",
    data_memory_bytes=512 * KIB,
    program_memory_bytes=0,
    locks=64,
    dma_in_channels=6,
    dma_out_channels=6,
    buffer_descriptors=48,  # even channels use BDs 0-23, odd channels 24-47
    bd_dims=4,
    max_bd_wrap=1023,
    max_bd_stride=2**17,
    default_stack_bytes=0,
)
SHIM_TILE = TileKind(
    kind="shim",
    data_memory_bytes=0,
    program_memory_bytes=0,
    locks=16,
    dma_in_channels=2,
    dma_out_channels=2,
    buffer_descriptors=16,
    bd_dims=3,
    max_bd_wrap=1023,
    max_bd_stride=2**20,
    default_stack_bytes=0,
)


@dataclass(frozen=True, repr=False)
class Device:
    """One `aie.device(...)` target: a whole NPU array or a partition of its first columns."""

    name: str  # the exact aie.device(...) name, e.g. "npu2_3col"
    family: str  # "npu1" or "npu2"
    arch: str  # "aie2" or "aie2p"
    n_cols: int
    full_elf: bool  # whether the firmware runs full ELFs (LOAD_PDI); False on npu1
    clock_ghz: float
    xrt_names: tuple[str, ...]  # what xrt-smi calls this NPU
    n_rows: int = 6
    shim_row: int = 0
    mem_row: int = 1
    compute_rows: tuple[int, ...] = (2, 3, 4, 5)
    compute: TileKind = COMPUTE_TILE
    mem: TileKind = MEM_TILE
    shim: TileKind = SHIM_TILE
    max_in_flight: int = 4  # runs in flight per hardware context
    dma_repeat_max: int = 64  # the outermost dma_memcpy_nd size

    @property
    def peano_target(self) -> str:
        """The clang `--target` Peano compiles this device's kernels for."""
        return f"{self.arch}-none-unknown-elf"

    @property
    def shim_bd_ids(self) -> int:
        """How many BD ids (0 to this minus 1) a runtime sequence may use per shim tile."""
        return self.shim.buffer_descriptors

    @property
    def compute_tiles(self) -> list[tuple[int, int]]:
        """(col, row) of every compute tile, column by column: (0,2), (0,3), ..., (1,2), ..."""
        return [(col, row) for col in range(self.n_cols) for row in self.compute_rows]

    @property
    def mem_tiles(self) -> list[tuple[int, int]]:
        """(col, row) of every mem tile, by column."""
        return [(col, self.mem_row) for col in range(self.n_cols)]

    @property
    def shim_tiles(self) -> list[tuple[int, int]]:
        """(col, row) of every shim tile, by column."""
        return [(col, self.shim_row) for col in range(self.n_cols)]

    def describe(self) -> str:
        """A one-line summary of the device."""
        elf = "full ELF" if self.full_elf else "xclbin only (no full ELF)"
        return (
            f"{self.name}: {self.arch.upper()} ({self.family} family), "
            f"{self.n_cols} column{'s' if self.n_cols > 1 else ''} x {self.n_rows} rows: "
            f"{len(self.compute_tiles)} compute ({self.compute.data_memory_bytes // KIB} KiB), "
            f"{len(self.mem_tiles)} mem ({self.mem.data_memory_bytes // KIB} KiB), "
            f"{len(self.shim_tiles)} shim; {elf}; up to {self.clock_ghz} GHz"
        )

    def __repr__(self) -> str:
        return f"<Device {self.name}>"


def _with_partitions(whole: Device) -> list[Device]:
    """The whole-array device followed by its 1 .. n_cols-1 column partitions."""
    partitions = [
        dataclasses.replace(whole, name=f"{whole.family}_{cols}col", n_cols=cols)
        for cols in range(1, whole.n_cols)
    ]
    return [whole, *partitions]


_NPU1 = Device(
    name="npu1",
    family="npu1",
    arch="aie2",
    n_cols=4,
    full_elf=False,
    clock_ghz=1.6,
    xrt_names=("npu1", "Phoenix"),
)
_NPU2 = Device(
    name="npu2",
    family="npu2",
    arch="aie2p",
    n_cols=8,
    full_elf=True,
    clock_ghz=1.8,
    xrt_names=("npu4", "npu5", "npu6"),
)
_CATALOG: dict[str, Device] = {
    device.name: device for device in _with_partitions(_NPU1) + _with_partitions(_NPU2)
}

_current: Device = _NPU2


def devices() -> tuple[Device, ...]:
    """Every catalog device: npu1, npu1_1col .. npu1_3col, npu2, npu2_1col .. npu2_7col."""
    return tuple(_CATALOG.values())


def _lookup(name: object) -> Device:
    device = _CATALOG.get(name) if isinstance(name, str) else None
    if device is None:
        known = ", ".join(_CATALOG)
        raise UnknownDevice(
            f"unknown device {name!r}: known devices are {known}. "
            "Pass one of these names to from_name()."
        )
    return device


def _check_columns(whole: Device, n_cols: object) -> None:
    if type(n_cols) is not int or not 1 <= n_cols <= whole.n_cols:
        raise UnknownDevice(
            f"{whole.name} has 1 to {whole.n_cols} columns, not {n_cols!r}: "
            f"pass n_cols between 1 and {whole.n_cols}."
        )


def from_name(name: str, n_cols: int | None = None) -> Device:
    """The catalog device called `name`, or the `n_cols`-column partition of its family.

    from_name("npu1", n_cols=2) is npu1_2col; from_name("npu1", n_cols=4) is npu1 itself.
    """
    device = _lookup(name)
    if n_cols is None:
        return device
    whole = _CATALOG[device.family]
    _check_columns(whole, n_cols)
    if device is not whole and n_cols != device.n_cols:
        raise UnknownDevice(
            f"{device.name} is the {device.n_cols}-column partition, not {n_cols} columns: "
            f"call from_name({device.family!r}, n_cols={n_cols}), or drop n_cols."
        )
    if n_cols == whole.n_cols:
        return whole
    return _CATALOG[f"{whole.family}_{n_cols}col"]


def _as_device(device: Device | str) -> Device:
    if isinstance(device, Device):
        return device
    if isinstance(device, str):
        return from_name(device)
    raise UnknownDevice(
        f"set_current_device() takes a Device or a device name, "
        f"not {type(device).__name__} {device!r}: pass from_name('npu2') or a name like 'npu2'."
    )


def get_current_device() -> Device:
    """The device compile() builds for: npu2 until set_current_device() is called."""
    return _current


def set_current_device(device: Device | str) -> None:
    """Make `device` (a Device or a catalog name) the current device."""
    global _current
    _current = _as_device(device)


@contextmanager
def using_device(device: Device | str) -> Iterator[Device]:
    """Make `device` current inside the block; the previous device comes back on any exit."""
    previous = _current
    set_current_device(device)
    try:
        yield _current
    finally:
        set_current_device(previous)
