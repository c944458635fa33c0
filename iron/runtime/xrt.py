"""The XRT backend: a built design run on a Ryzen AI NPU through pyxrt (XRT 2.25), as
docs/platform.md section 9 describes. It detects an NPU, imports pyxrt lazily (saying what to
install when it is missing), opens the device, hardware context, kernel and host buffers once
per design, makes runs with every argument set explicitly, holds and restarts them (at most 4 in
flight per context; a CarriedLoop queues the runs of a deeper ring on the host), patches per-call DMA offsets (xclbin) or writes the per-call words into the
control scratchpad (full ELF), checks each run's final state, and binds rings of runs for device
loops.
"""
from __future__ import annotations

import sys
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from iron.errors import (
    ArgumentError,
    BackendUnavailable,
    BuildError,
    DeviceTimeout,
    IndexOutOfRange,
    LoopError,
    PlacementError,
)

MAX_IN_FLIGHT = 4  # the aie2-family driver's commands in flight per context; a fifth start blocks
DEFAULT_TIMEOUT_MS = 2000
_NPU_OPCODE = 3  # xclbin kernel argument 0: run the instruction stream
_FIXED_ARGS = 3  # xclbin kernel arguments before the host buffers: opcode, instructions, length
_DDR_PATCH_OPCODE = 0x81  # first word of a DDR address-patch op in the instruction stream
_ARG_PLUS_SLOT = 4  # word 4 of that op: the byte offset XRT adds to the buffer's address
_WORD_MIN, _WORD_END = -(2**31), 2**32


class HostBuffer(NamedTuple):
    """One runtime-sequence argument: its name and its size in bytes."""

    name: str
    nbytes: int


class AddressPatch(NamedTuple):
    """Add `words[word] * byte_stride` bytes to the DDR-patch offset at `insts[insts_word]`.

    `insts_word` indexes the 32-bit instruction stream and must be word 4 (the offset, mlir-aie's
    `arg_plus`) of a 6-word DDR address-patch op `[0x81, 24, register, arg_idx, arg_plus, 0]`.
    """

    insts_word: int
    word: int
    byte_stride: int


def describe_npu(dev_root: str | Path = "/dev", sys_root: str | Path = "/sys") -> str | None:
    """The vbnv of the first NPU (e.g. "RyzenAI-npu4"), or None when there is none.

    An NPU is an `accel*` node under `dev_root`/accel whose `sys_root`/class/accel/<node>/device
    has a non-empty vbnv file (other accelerators on /dev/accel, such as Intel's, have none).
    """
    for node in sorted(Path(dev_root, "accel").glob("accel*")):
        try:
            vbnv = Path(sys_root, "class", "accel", node.name, "device", "vbnv").read_text()
        except OSError:
            continue
        if vbnv.strip():
            return vbnv.strip()
    return None


def npu_present(dev_root: str | Path = "/dev", sys_root: str | Path = "/sys") -> bool:
    """True when /dev and /sys show a Ryzen AI NPU (see describe_npu)."""
    return describe_npu(dev_root, sys_root) is not None


def load_pyxrt():
    """Import pyxrt, or raise BackendUnavailable saying how to install it."""
    try:
        import pyxrt
    except ImportError as exc:
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        raise BackendUnavailable(
            f"iron's XRT backend needs pyxrt, XRT's Python binding, which Python {version} "
            f"cannot import ({exc}). pyxrt is not on PyPI: install XRT 2.25 from Debian "
            "trixie-backports, forky or sid (`apt install python3-xrt libxrt-npu2 "
            "libxrt-utils-npu`), Ubuntu 26.04 or AMD's XRT builds and run the system Python it "
            "is built for (a virtual environment needs --system-site-packages), or set "
            "IRON_BACKEND=emulator to run everything on the emulator."
        ) from exc
    return pyxrt


@dataclass
class _RunParts:
    """What the backend keeps beside one held run."""

    run: Any
    insts_bo: Any = None  # xclbin: this run's own copy of the instruction stream
    patched: bool = False  # xclbin: insts_bo holds a patched copy
    scratchpad: Any = None  # full ELF: run.get_ctrl_scratchpad_bo()


class XrtDesign:
    """One compiled design loaded on the NPU: device, context, kernel and host buffers, made once.

    `artifacts` has `image` ("xclbin" or "elf"), `xclbin`, `insts` (little-endian 32-bit words,
    aiecc's insts.bin), `elf` and `kernel_name` ("MLIR_AIE" or "main:sequence");
    `host_buffers` are the runtime-sequence arguments in order, as (name, nbytes) pairs.
    After a DeviceTimeout the context is not reusable: make a new XrtDesign.
    """

    def __init__(self, name: str, artifacts, host_buffers: Sequence, *, pyxrt=None, shared=None):
        self.name = name
        self._shared = dict(shared or {})
        self.image = artifacts.image
        self.host_buffers = [HostBuffer(*buffer) for buffer in host_buffers]
        self._xrt = pyxrt if pyxrt is not None else load_pyxrt()
        self._insts = self._read_artifacts(artifacts)
        self._device = self._open_device()
        if self.image == "xclbin":
            self._load_xclbin(artifacts)
        else:
            self._load_elf(artifacts)
        self._runs: dict[int, _RunParts] = {}
        self._in_flight: deque = deque()

    # -- loading ---------------------------------------------------------------------------

    def _read_artifacts(self, artifacts) -> np.ndarray | None:
        if self.image not in ("xclbin", "elf"):
            raise BuildError(
                f"Design '{self.name}' has built artifacts of image kind {self.image!r}; the XRT "
                "backend runs 'xclbin' (with insts) or 'elf'. Rebuild the design for npu1 or npu2."
            )
        needed = {"xclbin": [("xclbin", artifacts.xclbin), ("instruction stream", artifacts.insts)],
                  "elf": [("full ELF", artifacts.elf)]}[self.image]
        for what, path in needed:
            if path is None or not Path(path).is_file():
                raise BuildError(
                    f"Design '{self.name}' cannot be loaded: its {what} {path} does not exist. "
                    "Rebuild the design; its build output is incomplete."
                )
        return self._read_insts(Path(artifacts.insts)) if self.image == "xclbin" else None

    def _read_insts(self, path: Path) -> np.ndarray:
        size = path.stat().st_size
        if size == 0 or size % 4:
            raise BuildError(
                f"Design '{self.name}' cannot be loaded: its instruction stream {path} has {size} "
                "bytes, not a positive multiple of 4. Rebuild the design; its build output is "
                "damaged."
            )
        return np.fromfile(path, dtype="<u4")

    def _open_device(self):
        try:
            return self._xrt.device(0)
        except RuntimeError as exc:
            raise BackendUnavailable(
                f"No NPU is available to XRT for design '{self.name}': pyxrt.device(0) raised "
                f"{str(exc)!r}. Check that the amdxdna driver is loaded and /dev/accel/accel0 "
                "exists (`xrt-smi examine` lists the NPU), or set IRON_BACKEND=emulator to run on "
                "the emulator."
            ) from exc

    def _load_xclbin(self, artifacts) -> None:
        xrt = self._xrt
        xclbin = xrt.xclbin(str(artifacts.xclbin))
        self._check_buffer_count(xclbin, artifacts)
        self._device.register_xclbin(xclbin)
        self._context = xrt.hw_context(self._device, xclbin.get_uuid())
        self._kernel = xrt.kernel(self._context, artifacts.kernel_name)
        self._insts_group = self._kernel.group_id(1)
        self._bos = [
            self._shared.get(index) or xrt.bo(self._device, buffer.nbytes, xrt.bo.host_only,
                                              self._kernel.group_id(_FIXED_ARGS + index))
            for index, buffer in enumerate(self.host_buffers)
        ]
        self._xclbin = xclbin

    def _check_buffer_count(self, xclbin, artifacts) -> None:
        declared = {kernel.get_name(): kernel.get_num_args() for kernel in xclbin.get_kernels()}
        kernel_name, xclbin_name = artifacts.kernel_name, Path(artifacts.xclbin).name
        if kernel_name not in declared:
            raise BuildError(
                f"Design '{self.name}': {xclbin_name} has no kernel {kernel_name!r} (it has "
                f"{sorted(declared)}). Rebuild the design."
            )
        room = declared[kernel_name] - _FIXED_ARGS
        if len(self.host_buffers) > room:
            names = ", ".join(buffer.name for buffer in self.host_buffers)
            raise PlacementError(
                f"Design '{self.name}' has {len(self.host_buffers)} host buffers ({names}), but "
                f"kernel {kernel_name} of {xclbin_name} takes at most {room} (get_num_args() "
                f"{declared[kernel_name]} minus opcode, instructions and length), and XRT crashes "
                "instead of raising when given more. Merge host buffers, or rebuild with an aiecc "
                "from July 2026 or later, whose xclbin kernel takes more."
            )

    def _load_elf(self, artifacts) -> None:
        xrt = self._xrt
        self._elf = xrt.elf(str(artifacts.elf))
        self._context = xrt.hw_context(self._device, self._elf)
        self._kernel = xrt.ext.kernel(self._context, artifacts.kernel_name)
        # A full-ELF kernel has no memory groups (never call group_id() on it): group 0 is
        # what xrt::ext::bo uses by default.
        self._bos = [
            self._shared.get(index) or xrt.bo(self._context, buffer.nbytes, xrt.bo.host_only, 0)
            for index, buffer in enumerate(self.host_buffers)
        ]

    # -- host buffers ----------------------------------------------------------------------

    def bo(self, index_or_name: int | str):
        """The BO of a host buffer, to share with another design of the same graph
        (`shared={index: bo}`): versions of one graph keep their states in one BO. This assumes
        a host_only BO made on one hw_context of a device can be an argument of a run on another."""
        return self._bos[self._resolve(index_or_name)]

    def write(self, index_or_name: int | str, array) -> None:
        """Copy `array` into a host buffer (from byte 0) and sync it to the device."""
        index = self._resolve(index_or_name)
        data = np.ascontiguousarray(array)
        if data.nbytes > self.host_buffers[index].nbytes:
            raise ArgumentError(
                f"Host buffer '{self.host_buffers[index].name}' of design '{self.name}' holds "
                f"{self.host_buffers[index].nbytes} bytes, but the array given has {data.nbytes} "
                f"bytes ({data.dtype}, shape {data.shape}). Pass an array of at most "
                f"{self.host_buffers[index].nbytes} bytes."
            )
        self._load(self._bos[index], data)

    def read(self, index_or_name: int | str, dtype, shape) -> np.ndarray:
        """Sync a host buffer from the device and return its first bytes as `dtype` of `shape`."""
        index = self._resolve(index_or_name)
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape)) * dtype.itemsize
        if nbytes > self.host_buffers[index].nbytes:
            raise ArgumentError(
                f"Host buffer '{self.host_buffers[index].name}' of design '{self.name}' holds "
                f"{self.host_buffers[index].nbytes} bytes, but reading {dtype} of shape {shape} "
                f"needs {nbytes}. Read at most {self.host_buffers[index].nbytes} bytes."
            )
        return self._fetch(self._bos[index], nbytes).view(dtype).reshape(shape)

    def _resolve(self, index_or_name: int | str) -> int:
        names = [buffer.name for buffer in self.host_buffers]
        if isinstance(index_or_name, str) and index_or_name in names:
            return names.index(index_or_name)
        if type(index_or_name) is int and 0 <= index_or_name < len(names):
            return index_or_name
        raise ArgumentError(
            f"Design '{self.name}' has no host buffer {index_or_name!r}; its host buffers are "
            f"{', '.join(names)}. Pass one of those names or an index from 0 to {len(names) - 1}."
        )

    def _load(self, bo, data: np.ndarray) -> None:
        bo.write(np.ascontiguousarray(data).reshape(-1).view(np.uint8), 0)
        bo.sync(self._xrt.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE)

    def _fetch(self, bo, nbytes: int) -> np.ndarray:
        bo.sync(self._xrt.xclBOSyncDirection.XCL_BO_SYNC_BO_FROM_DEVICE)
        return np.asarray(bo.read(nbytes, 0)).view(np.uint8)

    # -- runs ------------------------------------------------------------------------------

    def make_run(self, feedback: tuple[int, Any] | None = None):
        """A held pyxrt.run with every argument set: restart it with start() for each call.

        xclbin: 0 <- opcode 3, 1 <- this run's own instruction BO, 2 <- the instruction word
        count, 3+i <- host buffer i. Full ELF: i <- host buffer i. `feedback=(i, bo)` binds
        host-buffer argument i to `bo` instead (e.g. another run's control scratchpad BO).
        """
        if feedback is not None:
            self._check_feedback_arg(feedback[0])
        run = self._xrt.run(self._kernel)
        self._bind(self._register(run), feedback)
        return run

    def make_ring(self, depth: int, feedback_arg: int) -> list:
        """`depth` held runs for a device loop (full ELF only), bound in a ring.

        Run k's argument `feedback_arg` (a host-buffer index: the buffer the Emit step writes)
        is bound to run (k+1) % depth's control scratchpad BO, so one run's Emit writes the
        next run's per-call words. Start them without words after the first call. This assumes
        (not yet checked on hardware) that XRT accepts a run's control scratchpad BO as a buffer
        argument of another run on the same hw_context, and leaves a scratchpad as the device
        wrote it until that run starts; runs on one context execute in order, so run k+1 reads
        what run k wrote.
        """
        self._require_elf("A device loop")
        self._check_feedback_arg(feedback_arg)
        if depth < 1:
            raise LoopError(
                f"A device loop of design '{self.name}' needs a ring of at least 1 run, got "
                f"depth {depth}. Pass a depth of 1 or more (the loop starts at most {MAX_IN_FLIGHT} of its "
                "runs at once and queues the rest)."
            )
        runs = [self._xrt.run(self._kernel) for _ in range(depth)]
        parts = [self._register(run) for run in runs]
        for k, part in enumerate(parts):
            self._bind(part, (feedback_arg, parts[(k + 1) % depth].scratchpad))
        return runs

    def _register(self, run) -> _RunParts:
        if self.image == "xclbin":
            insts_bo = self._xrt.bo(
                self._device, self._insts.nbytes, self._xrt.bo.cacheable, self._insts_group
            )
            self._load(insts_bo, self._insts)
            parts = _RunParts(run, insts_bo=insts_bo)
        else:
            parts = _RunParts(run, scratchpad=run.get_ctrl_scratchpad_bo())
        self._runs[id(run)] = parts
        return parts

    def _bind(self, parts: _RunParts, feedback: tuple[int, Any] | None) -> None:
        run, first = parts.run, 0
        if self.image == "xclbin":
            run.set_arg(0, _NPU_OPCODE)
            run.set_arg(1, parts.insts_bo)
            run.set_arg(2, len(self._insts))
            first = _FIXED_ARGS
        for index, bo in enumerate(self._bos):
            bound = feedback[1] if feedback is not None and feedback[0] == index else bo
            run.set_arg(first + index, bound)

    def start(self, run, words: Sequence[int] | None = None,
              patches: Sequence[AddressPatch] | None = None) -> None:
        """Start one execution of `run` with this call's 32-bit words.

        xclbin: `patches` rewrite this run's copy of the instruction stream (from the built one)
        and sync it; words are used only through patches. Full ELF: `words` are written into the
        run's control scratchpad and synced; with words=None the scratchpad is left as it is (a
        ring run's Emit-written words). A run still in flight is waited first, and when 4 runs
        are in flight the oldest is waited first.
        """
        parts = self._parts(run)
        load = self._prepare(parts, words, patches)
        if run in self._in_flight:
            self.wait(run)
        if len(self._in_flight) >= MAX_IN_FLIGHT:
            self.wait(self._in_flight[0])
        if load is not None:
            self._load(*load)
            parts.patched = bool(patches)
        run.start()
        self._in_flight.append(run)

    def wait(self, run, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> None:
        """Wait for `run` and raise DeviceTimeout unless it completed; no-op if not in flight."""
        if run not in self._in_flight:
            return
        state = run.wait(timeout_ms)
        if int(state) != int(self._xrt.ert_cmd_state.ERT_CMD_STATE_COMPLETED):
            raise DeviceTimeout(
                f"Run of design '{self.name}' did not complete: run.wait({timeout_ms}) returned "
                f"{getattr(state, 'name', state)} (XRT state {int(state)}). On the NPU a mismatch "
                "between what the runtime sequence moves and what the cores acquire hangs "
                "silently, and XRT reports it only as a timeout after about 2 s. Run the design "
                "with IRON_BACKEND=emulator, whose DeviceHang names the blocked cores and FIFOs."
            )
        self._in_flight.remove(run)

    def scratchpad_bo(self, run):
        """The control scratchpad BO of a full-ELF run (to bind as another run's feedback)."""
        self._require_elf("A control scratchpad")
        return self._parts(run).scratchpad

    def read_words(self, run, count: int) -> np.ndarray:
        """Sync a full-ELF run's control scratchpad from the device; its first `count` words."""
        scratchpad = self.scratchpad_bo(run)
        if count * 4 > scratchpad.size():
            raise ArgumentError(
                f"The control scratchpad of design '{self.name}' holds {scratchpad.size()} bytes, "
                f"fewer than the {count} words asked for. Read at most {scratchpad.size() // 4} "
                "words."
            )
        return self._fetch(scratchpad, count * 4).view("<u4")

    def _parts(self, run) -> _RunParts:
        parts = self._runs.get(id(run))
        if parts is None or parts.run is not run:
            raise ArgumentError(
                f"That run was not made by design '{self.name}'. Start and wait only runs "
                "returned by its make_run() or make_ring()."
            )
        return parts

    def _require_elf(self, what: str) -> None:
        if self.image != "elf":
            raise LoopError(
                f"{what} needs a full ELF (npu2), and design '{self.name}' was built as an "
                "xclbin. Build it for npu2, whose full ELF gives each run a control scratchpad."
            )

    def _check_feedback_arg(self, index: int) -> None:
        if not 0 <= index < len(self.host_buffers):
            names = ", ".join(buffer.name for buffer in self.host_buffers)
            raise LoopError(
                f"Design '{self.name}' has no host buffer {index} to bind as feedback; it has "
                f"{len(self.host_buffers)} ({names}). Pass the index of the runtime-sequence "
                "argument the Emit step writes."
            )

    # -- per-call words --------------------------------------------------------------------

    def _prepare(self, parts: _RunParts, words, patches) -> tuple[Any, np.ndarray] | None:
        """Validate this call's words and patches; what to load before the start, if anything."""
        values = self._words(words)
        if self.image == "elf":
            if patches:
                raise ArgumentError(
                    f"Design '{self.name}' is a full ELF, whose runs read DMA offsets from the "
                    "control scratchpad; address patches apply only to xclbin designs. Pass the "
                    "words alone."
                )
            return None if values is None else (parts.scratchpad, self._fit(parts, values))
        if patches:
            return parts.insts_bo, self._patched(values, patches)
        return (parts.insts_bo, self._insts) if parts.patched else None

    def _words(self, words) -> np.ndarray | None:
        if words is None:
            return None
        values = np.asarray(words, dtype=np.int64).reshape(-1)
        for index, value in enumerate(values):
            if not _WORD_MIN <= value < _WORD_END:
                raise ArgumentError(
                    f"Per-call word {index} of design '{self.name}' is {value}, which does not "
                    f"fit 32 bits. Pass words from {_WORD_MIN} to {_WORD_END - 1}."
                )
        return (values & 0xFFFFFFFF).astype("<u4")

    def _fit(self, parts: _RunParts, values: np.ndarray) -> np.ndarray:
        size = parts.scratchpad.size()
        if values.nbytes > size:
            raise ArgumentError(
                f"Design '{self.name}' was given {values.size} per-call words ({values.nbytes} "
                f"bytes), but its run's control scratchpad holds {size} bytes. Pass at most "
                f"{size // 4} words."
            )
        return values

    def _patched(self, values: np.ndarray | None, patches: Sequence[AddressPatch]) -> np.ndarray:
        stream = self._insts.copy()
        for patch in patches:
            self._check_patch_site(patch.insts_word)
            if values is None or not 0 <= patch.word < values.size:
                raise ArgumentError(
                    f"The address patch at instruction word {patch.insts_word} of design "
                    f"'{self.name}' uses per-call word {patch.word}, but "
                    f"{0 if values is None else values.size} words were given. Pass all the "
                    "design's per-call words."
                )
            offset = int(values[patch.word]) * patch.byte_stride
            patched = int(stream[patch.insts_word]) + offset
            if not 0 <= patched < 2**32:
                raise IndexOutOfRange(
                    f"Per-call word {patch.word} of design '{self.name}' is "
                    f"{int(values[patch.word])}; times the stride of {patch.byte_stride} bytes it "
                    f"moves the DMA at instruction word {patch.insts_word} to byte offset "
                    f"{patched}, which does not fit 32 bits. Keep per-call values within the "
                    "tensor they index."
                )
            stream[patch.insts_word] = patched
        return stream

    def _check_patch_site(self, insts_word: int) -> None:
        op_start = insts_word - _ARG_PLUS_SLOT
        in_stream = 0 <= op_start and insts_word < len(self._insts)
        if in_stream and int(self._insts[op_start]) & 0xFF == _DDR_PATCH_OPCODE:
            return
        raise BuildError(
            f"Design '{self.name}' has an address patch at instruction word {insts_word}, which "
            f"is not the offset word of a DDR address-patch op (opcode 0x81, 4 words earlier) in "
            f"its {len(self._insts)}-word instruction stream. The patch table does not match the "
            "built instructions: rebuild the design."
        )
