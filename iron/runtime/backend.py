"""Which backend runs compiled graphs: `IRON_BACKEND=emulator|xrt` forces one (xrt only where an
NPU and pyxrt are present, else BackendUnavailable names what is missing, before anything is
built); otherwise XRT where both are present and the emulator elsewhere, said once per process
on stderr with the reason.
"""
from __future__ import annotations

import os
import sys

from iron.errors import BackendUnavailable

_announced: set[str] = set()
CHOICES = ("emulator", "xrt")


def select_backend() -> str:
    forced = os.environ.get("IRON_BACKEND", "").strip().lower()
    if forced:
        if forced not in CHOICES:
            raise BackendUnavailable(
                f"IRON_BACKEND={forced!r} is not a backend: use IRON_BACKEND=emulator or IRON_BACKEND=xrt."
            )
        if forced == "xrt":
            _require_xrt()
        _announce(forced, "IRON_BACKEND is set")
        return forced
    from iron.runtime.xrt import describe_npu, load_pyxrt

    npu = describe_npu()
    if npu is None:
        _announce("emulator", "no Ryzen AI NPU found under /dev/accel")
        return "emulator"
    try:
        load_pyxrt()
    except BackendUnavailable:
        _announce("emulator", f"an NPU ({npu}) is present but pyxrt is not installed")
        return "emulator"
    _announce("xrt", f"NPU {npu} with pyxrt")
    return "xrt"


def _require_xrt() -> None:
    from iron.runtime.xrt import describe_npu, load_pyxrt

    if describe_npu() is None:
        raise BackendUnavailable(
            "IRON_BACKEND=xrt asks for an NPU, but this machine shows none: no /dev/accel/accel* "
            "node has a Ryzen AI NPU behind it (its /sys/class/accel/<node>/device/vbnv). The NPU "
            "needs the amdxdna kernel driver: check with `ls /dev/accel` and `xrt-smi examine` "
            "(which lists the NPU), load the driver with `sudo modprobe amdxdna`, or set "
            "IRON_BACKEND=emulator to run on the emulator."
        )
    load_pyxrt()


def _announce(backend: str, why: str):
    if backend in _announced or os.environ.get("IRON_QUIET"):
        return
    _announced.add(backend)
    print(f"iron: running on the {backend} ({why}); set IRON_BACKEND to choose.", file=sys.stderr)
