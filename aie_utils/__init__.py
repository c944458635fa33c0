"""aie_utils: the NPU device catalog and the current device.

Re-exports the public names of `aie_utils.devices`; see that module for what they do and do not.
"""

from aie_utils.devices import (
    Device,
    TileKind,
    devices,
    from_name,
    get_current_device,
    set_current_device,
    using_device,
)

__all__ = [
    "Device",
    "TileKind",
    "devices",
    "from_name",
    "get_current_device",
    "set_current_device",
    "using_device",
]
