"""A stand-in for pyxrt 2.25 that enforces its documented rules and records every call.

What it does: `new_pyxrt(...)` returns a fresh module object with the pyxrt names the XRT
backend uses (device, xclbin, uuid, elf, hw_context, kernel, ext.kernel, bo, run,
xclBOSyncDirection, ert_cmd_state, enumerate_devices), written against the pyxrt calls of
docs/platform.md section 9 (XRT's pyxrt.cpp). Each call that makes a handle, changes state or
moves data is appended to `module.fake_state.calls` as text such as "run1.set_arg(3, bo1)".
Every BO keeps a host copy and a device copy of its bytes (`host_bytes`, `device_bytes`); sync
moves them, and `fake_state.on_complete(run)`, if set, stands for the device when a run
completes: it may read `run.args` and `run.scratchpad` and change their `device_bytes`.

The rules it enforces, and what real pyxrt does when they are broken:
- enum values are reachable only qualified (`pyxrt.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE`):
  the top-level names do not exist (AttributeError, as in pyxrt);
- enums compare equal only to values of their own enum; comparing with an int raises
  ContractViolation (pyxrt silently answers False): use int(value);
- NPU BOs are `host_only` or `cacheable` only (ContractViolation; other flags misbehave);
  `bo.flags` has no `|` (TypeError, as in pyxrt);
- no empty handles: device(), run(), ... raise ContractViolation (pyxrt crashes with SIGSEGV);
- `kernel(*args)` raises ContractViolation (pyxrt silently drops arguments); `group_id()` on a
  full-ELF (ext) kernel raises ContractViolation; set_arg beyond the kernel's arguments raises
  ContractViolation (XRT crashes);
- start(): restarting a run that has not completed raises RuntimeError("bad command state")
  (as observed); a fifth run in flight on one context raises ContractViolation (pyxrt blocks,
  and nothing here would ever complete it); the xclbin ABI (arg 0 = 3, arg 1 a cacheable BO,
  arg 2 an int, then host_only BOs) and contiguous arguments are checked; a BO written and not
  synced TO_DEVICE raises ContractViolation (the device would read stale bytes);
- bo.read() after a run completed and before sync(FROM_DEVICE) raises ContractViolation;
- run.wait() without a timeout raises ContractViolation (it blocks forever on a hang); run.wait(ms)
  returns `fake_state.wait_state` (COMPLETED by default; TIMEOUT leaves the run in flight);
- device(0) with `devices=0` raises RuntimeError(" No such device with index '0'"); a missing
  xclbin raises "No such file '...'", a missing ELF "... is not found or is not a valid ELF file".

What it does not: execute anything, model keyword arguments, sub-buffers, runlists, modules,
ext.bo, bo.map(), partial syncs or any pyxrt name the backend does not use (those are simply
absent: AttributeError).
"""
from __future__ import annotations

import types
from pathlib import Path
from typing import ClassVar

import numpy as np

TO_DEVICE, FROM_DEVICE = 0, 1
NEW, QUEUED, COMPLETED, TIMEOUT = 1, 2, 4, 8
MAX_IN_FLIGHT = 4


class ContractViolation(AssertionError):
    """The code under test broke a pyxrt rule that the real binding does not report cleanly."""


class FakeState:
    """The configuration and the call record shared by the handles of one fake module."""

    def __init__(self, devices, xclbin_num_args, elf_num_args, scratchpad_bytes, wait_state):
        self.devices = devices
        self.xclbin_num_args = xclbin_num_args
        self.elf_num_args = elf_num_args
        self.scratchpad_bytes = scratchpad_bytes
        self.wait_state = wait_state
        self.on_complete = None
        self.calls: list[str] = []
        self._counts: dict[str, int] = {}

    def label(self, kind: str) -> str:
        self._counts[kind] = self._counts.get(kind, 0) + 1
        return f"{kind}{self._counts[kind]}"

    def record(self, text: str) -> None:
        self.calls.append(text)


# -- enums -----------------------------------------------------------------------------------


class PybindEnum:
    """A classic pybind11 enum value: .name, .value, int(); equal only within its own enum."""

    _by_value: ClassVar[dict] = {}

    def __new__(cls, value):
        if type(value) is not int:
            raise TypeError(f"__init__(): incompatible constructor arguments: {value!r}")
        return cls._by_value.get(value) or cls._member("???", value)

    @classmethod
    def _member(cls, name: str, value: int):
        member = object.__new__(cls)
        member.name, member.value = name, value
        return member

    def __int__(self):
        return self.value

    __index__ = __int__

    def __eq__(self, other):
        if type(other) is type(self):
            return self.value == other.value
        raise ContractViolation(
            f"{self!r} == {other!r}: pyxrt enums are pybind11 enums, not IntEnum, and real pyxrt "
            "answers False here. Compare int(value) instead."
        )

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash(self.value)

    def __repr__(self):
        return f"<{type(self).__name__}.{self.name}: {self.value}>"


def _enum(type_name: str, **members: int) -> type:
    cls = type(type_name, (PybindEnum,), {"_by_value": {}})
    for name, value in members.items():
        member = cls._member(name, value)
        cls._by_value.setdefault(value, member)
        setattr(cls, name, member)
    return cls


xclBOSyncDirection = _enum(
    "xclBOSyncDirection", XCL_BO_SYNC_BO_TO_DEVICE=0, XCL_BO_SYNC_BO_FROM_DEVICE=1,
    XCL_BO_SYNC_BO_GMIO_TO_AIE=2, XCL_BO_SYNC_BO_AIE_TO_GMIO=3,
)
ert_cmd_state = _enum(
    "ert_cmd_state", ERT_CMD_STATE_NEW=1, ERT_CMD_STATE_QUEUED=2, ERT_CMD_STATE_COMPLETED=4,
    ERT_CMD_STATE_ERROR=5, ERT_CMD_STATE_ABORT=6, ERT_CMD_STATE_SUBMITTED=7,
    ERT_CMD_STATE_TIMEOUT=8, ERT_CMD_STATE_NORESPONSE=9, ERT_CMD_STATE_SKERROR=10,
    ERT_CMD_STATE_SKCRASHED=11,
)
bo_flags = _enum(
    "flags", normal=0, cacheable=16777216, device_only=268435456, host_only=536870912,
    p2p=1073741824, svm=134217728,
)
NPU_FLAGS = (bo_flags.host_only.value, bo_flags.cacheable.value)


def show(value) -> str:
    """How a value appears in the call record: handles by label, enums by name."""
    if isinstance(value, PybindEnum):
        return value.name
    return repr(value) if isinstance(value, str) else str(value)


# -- handles ---------------------------------------------------------------------------------


class Handle:
    """A pyxrt handle: labelled ("bo3") once made; never empty."""

    kind = "handle"
    _state: FakeState  # bound per fake module by new_pyxrt()

    def _require(self, args: tuple, count: int) -> tuple:
        if not args:
            raise ContractViolation(
                f"{type(self).__name__}() makes an empty handle; real pyxrt crashes the "
                "interpreter (SIGSEGV) on most of its methods."
            )
        if len(args) != count:
            raise TypeError(f"{type(self).__name__}(): incompatible constructor arguments {args}")
        return args

    def _require_path(self, args: tuple) -> tuple:
        if type(self._require(args, 1)[0]) is not str:
            raise TypeError(f"{type(self).__name__}(): incompatible constructor arguments {args} "
                            "(the path must be a str)")
        return args

    def _made(self, call: str) -> None:
        self.label = self._state.label(self.kind)
        self._state.record(f"{call} -> {self.label}")

    def __repr__(self):
        return self.label


class Device(Handle):
    kind = "dev"

    def __init__(self, *args):
        (index,) = self._require(args, 1)
        if type(index) is not int:
            raise TypeError(f"device(): incompatible constructor arguments {args}")
        if index >= self._state.devices:
            raise RuntimeError(f" No such device with index '{index}'")
        self.registered: set[str] = set()
        self._made(f"device({index})")

    def register_xclbin(self, xclbin):
        if not isinstance(xclbin, Xclbin):
            raise TypeError("register_xclbin(): incompatible function arguments")
        self.registered.add(xclbin.get_uuid().label)
        self._state.record(f"{self}.register_xclbin({xclbin})")
        return xclbin.get_uuid()


class Uuid(Handle):
    kind = "uuid"

    def __init__(self, *args):
        (self.text,) = self._require(args, 1)
        self.label = self._state.label(self.kind)

    def to_string(self) -> str:
        return self.text


class Xclbin(Handle):
    kind = "xclbin"

    def __init__(self, *args):
        (path,) = self._require_path(args)
        if not Path(path).is_file():
            raise RuntimeError(f"No such file '{path}'")
        self._made(f"xclbin({Path(path).name!r})")
        self._uuid = type(self)._uuid_class(f"00000000-0000-0000-0000-{self.label[6:]:0>12}")

    def get_uuid(self):
        return self._uuid

    def get_kernels(self):
        return [XclbinKernel("MLIR_AIE", self._state.xclbin_num_args)]


class XclbinKernel:
    """pyxrt.xclbin.xclbinkernel: a kernel's name and argument count, read from the xclbin."""

    def __init__(self, name: str, num_args: int):
        self._name, self._num_args = name, num_args

    def get_name(self) -> str:
        return self._name

    def get_num_args(self) -> int:
        return self._num_args


class Elf(Handle):
    kind = "elf"

    def __init__(self, *args):
        (path,) = self._require_path(args)
        if not Path(path).is_file():
            raise RuntimeError(f"{path} is not found or is not a valid ELF file")
        self.path = str(path)
        self._made(f"elf({Path(path).name!r})")


class HwContext(Handle):
    kind = "ctx"

    def __init__(self, *args):
        device, config = self._require(args, 2)
        if not isinstance(device, Device) or not isinstance(config, (Uuid, Elf)):
            raise TypeError(f"hw_context(): incompatible constructor arguments {args}")
        if isinstance(config, Uuid) and config.label not in device.registered:
            raise RuntimeError(f"No xclbin with uuid {config.to_string()} is registered")
        self.elf = config if isinstance(config, Elf) else None
        self.in_flight = 0
        self._made(f"hw_context({device}, {config})")


class Kernel(Handle):
    kind = "kernel"
    full_elf = False

    def __init__(self, *args):
        ctx, name = self._require(args, 2)
        if not isinstance(ctx, HwContext):
            raise ContractViolation("use kernel(hw_context, name); the device/uuid shims are "
                                    "deprecated")
        if (ctx.elf is not None) != self.full_elf:
            raise RuntimeError(f"No such kernel '{name}' in this hardware context")
        if name != ("main:sequence" if self.full_elf else "MLIR_AIE"):
            raise RuntimeError(f"No such kernel '{name}'")
        self.ctx = ctx
        self.num_args = self._state.elf_num_args if self.full_elf else self._state.xclbin_num_args
        self._made(f"{'ext.' if self.full_elf else ''}kernel({ctx}, {name!r})")

    def group_id(self, index: int) -> int:
        if self.full_elf:
            raise ContractViolation(f"{self}.group_id({index}): a kernel made from a full ELF "
                                    "has no memory groups; never call group_id() on it.")
        group = 10 + index
        self._state.record(f"{self}.group_id({index}) -> {group}")
        return group

    def __call__(self, *args):
        raise ContractViolation("kernel(*args) silently drops arguments it cannot convert; "
                                "make a pyxrt.run and set each argument with run.set_arg.")


class ExtKernel(Kernel):
    full_elf = True


class Bo(Handle):
    kind = "bo"
    flags = bo_flags
    normal, cacheable, device_only = bo_flags.normal, bo_flags.cacheable, bo_flags.device_only
    host_only, p2p, svm = bo_flags.host_only, bo_flags.p2p, bo_flags.svm

    def __init__(self, *args):
        owner, size, flags, group = self._require(args, 4)
        if not isinstance(owner, (Device, HwContext)) or not isinstance(flags, bo_flags):
            raise TypeError(f"bo(): incompatible constructor arguments {args}")
        if flags.value not in NPU_FLAGS:
            raise ContractViolation(f"bo flags {flags.name}: only host_only (data) and cacheable "
                                    "(instructions) are valid on the NPU.")
        self._setup(size, flags)
        self._made(f"bo({owner}, {size}, {flags.name}, {group})")

    def _setup(self, size: int, flags) -> None:
        self._size, self.flags = size, flags
        # XRT does not promise a new BO's bytes: the stand-in's are not zeros, so a design must
        # write every byte it relies on (a padded cut buffer's padding included)
        self.host_bytes, self.device_bytes = bytearray(b"\xff" * size), bytearray(b"\xff" * size)
        self.host_dirty = self.device_newer = False

    def size(self) -> int:
        return self._size

    def write(self, data, offset: int) -> None:
        raw = memoryview(data).cast("B")
        if offset + raw.nbytes > self._size:
            raise ContractViolation(f"{self}.write of {raw.nbytes} bytes at {offset} overruns "
                                    f"its {self._size} bytes")
        self.host_bytes[offset:offset + raw.nbytes] = raw
        self.host_dirty = True
        self._state.record(f"{self}.write({raw.nbytes} bytes at {offset})")

    def sync(self, direction) -> None:
        if not isinstance(direction, xclBOSyncDirection):
            raise TypeError(f"sync(): incompatible function arguments: {direction!r}")
        if direction.value == TO_DEVICE:
            self.device_bytes[:], self.host_dirty = self.host_bytes, False
        elif direction.value == FROM_DEVICE:
            self.host_bytes[:], self.device_newer = self.device_bytes, False
        else:
            raise ContractViolation(f"{self}.sync({direction.name}): not an NPU direction")
        self._state.record(f"{self}.sync({direction.name})")

    def read(self, size: int, offset: int) -> np.ndarray:
        if self.device_newer:
            raise ContractViolation(f"{self}.read after a run completed and before "
                                    "sync(XCL_BO_SYNC_BO_FROM_DEVICE): the host reads stale bytes")
        if offset + size > self._size:
            raise ContractViolation(f"{self}.read of {size} bytes at {offset} overruns its "
                                    f"{self._size} bytes")
        self._state.record(f"{self}.read({size} bytes at {offset})")
        return np.frombuffer(bytes(self.host_bytes[offset:offset + size]), dtype=np.int8).copy()


class Run(Handle):
    kind = "run"

    def __init__(self, *args):
        (kernel,) = self._require(args, 1)
        if not isinstance(kernel, Kernel):
            raise TypeError(f"run(): incompatible constructor arguments {args}")
        self.kernel, self.args, self.status = kernel, {}, NEW
        self.scratchpad = None
        self._made(f"run({kernel})")

    def set_arg(self, index: int, value) -> None:
        if type(index) is not int or type(value) is not int and not isinstance(value, Bo):
            raise TypeError(f"set_arg(): incompatible function arguments: {index!r}, {value!r}")
        if index >= self.kernel.num_args:
            raise ContractViolation(f"{self}.set_arg({index}, ...): {self.kernel} takes "
                                    f"{self.kernel.num_args} arguments; XRT crashes beyond them.")
        self.args[index] = value
        self._state.record(f"{self}.set_arg({index}, {show(value)})")

    def get_ctrl_scratchpad_bo(self):
        if not self.kernel.full_elf:
            raise ContractViolation("the control scratchpad exists only for runs of a full ELF")
        if self.scratchpad is None:
            self.scratchpad = object.__new__(type(self)._bo_class)
            self.scratchpad._setup(self._state.scratchpad_bytes, bo_flags.host_only)
            self.scratchpad.label = self._state.label("bo")
        self._state.record(f"{self}.get_ctrl_scratchpad_bo() -> {self.scratchpad}")
        return self.scratchpad

    def start(self) -> None:
        if self.status == QUEUED:
            raise RuntimeError("bad command state")
        if self.kernel.ctx.in_flight >= MAX_IN_FLIGHT:
            raise ContractViolation(f"{self}.start(): {MAX_IN_FLIGHT} runs are already in flight "
                                    "on this context; pyxrt blocks until one completes.")
        self._check_args()
        self.status = QUEUED
        self.kernel.ctx.in_flight += 1
        self._state.record(f"{self}.start()")

    def _bound(self) -> list:
        bos = [value for value in self.args.values() if isinstance(value, Bo)]
        return bos + ([self.scratchpad] if self.scratchpad is not None else [])

    def _check_args(self) -> None:
        values = [self.args.get(index) for index in range(len(self.args))]
        if None in values:
            raise ContractViolation(f"{self} arguments {sorted(self.args)} are not contiguous")
        data = values if self.kernel.full_elf else values[3:]
        fixed_ok = self.kernel.full_elf or (
            len(values) >= 3 and values[0] == 3 and isinstance(values[1], Bo)
            and values[1].flags.value == bo_flags.cacheable.value and type(values[2]) is int)
        if not fixed_ok or not all(isinstance(v, Bo) and v.flags.value == bo_flags.host_only.value
                                   for v in data):
            raise ContractViolation(f"{self} arguments {[show(v) for v in values]} break the "
                                    "kernel ABI")
        for bo in self._bound():
            if bo.host_dirty:
                raise ContractViolation(f"{self}.start() with {bo} written but not synced "
                                        "XCL_BO_SYNC_BO_TO_DEVICE")

    def wait(self, *args):
        if not args:
            raise ContractViolation("run.wait() without a timeout blocks forever on a hung "
                                    "design; use run.wait(ms).")
        (ms,) = args
        if self.status == NEW:
            raise ContractViolation(f"{self}.wait({ms}) on a run that was never started")
        if self.status == QUEUED:
            self._finish(self._state.wait_state)
        outcome = TIMEOUT if self.status == QUEUED else self.status
        self._state.record(f"{self}.wait({ms}) -> {ert_cmd_state(outcome).name}")
        return ert_cmd_state(outcome)

    def _finish(self, outcome: int) -> None:
        if outcome == TIMEOUT:
            return
        self.status = outcome
        self.kernel.ctx.in_flight -= 1
        if outcome == COMPLETED and self._state.on_complete is not None:
            self._state.on_complete(self)
        for bo in self._bound():
            bo.device_newer = True

    def state(self):
        return ert_cmd_state(self.status)


# -- the module ------------------------------------------------------------------------------


def _missing(name: str):
    for enum_name, prefix in (("xclBOSyncDirection", "XCL_BO_SYNC_"),
                              ("ert_cmd_state", "ERT_CMD_STATE_")):
        if name.startswith(prefix):
            raise AttributeError(f"module 'pyxrt' has no attribute '{name}' (use "
                                 f"pyxrt.{enum_name}.{name})")
    raise AttributeError(f"module 'pyxrt' has no attribute '{name}'")


def new_pyxrt(*, devices: int = 1, xclbin_num_args: int = 8, elf_num_args: int = 8,
              scratchpad_bytes: int = 64, wait_state: int = COMPLETED) -> types.ModuleType:
    """A fresh stand-in pyxrt module; its FakeState is `module.fake_state`."""
    state = FakeState(devices, xclbin_num_args, elf_num_args, scratchpad_bytes, wait_state)

    def bind(cls: type, name: str, **extra) -> type:
        return type(name, (cls,), {"_state": state, **extra})

    module = types.ModuleType("pyxrt", "stand-in for pyxrt 2.25 (tests/runtime/fake_pyxrt.py)")
    bo = bind(Bo, "bo")
    uuid = bind(Uuid, "uuid")
    module.__dict__.update(
        device=bind(Device, "device"), uuid=uuid, xclbin=bind(Xclbin, "xclbin", _uuid_class=uuid),
        elf=bind(Elf, "elf"), hw_context=bind(HwContext, "hw_context"),
        kernel=bind(Kernel, "kernel"), bo=bo, run=bind(Run, "run", _bo_class=bo),
        ext=types.ModuleType("pyxrt.ext"), xclBOSyncDirection=xclBOSyncDirection,
        ert_cmd_state=ert_cmd_state, XCL_BO_FLAGS_NONE=0, fake_state=state,
        enumerate_devices=lambda: state.devices, __getattr__=_missing,
    )
    module.ext.kernel = bind(ExtKernel, "kernel")
    return module
