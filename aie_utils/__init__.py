"""aie_utils: the NPU device catalog and the current device (the public names of
`aie_utils.devices`)."""

from aie_utils.devices import (
    Device,
    TileKind,
    UnknownDevice,
    devices,
    from_name,
    get_current_device,
    set_current_device,
    using_device,
)

__all__ = [
    "Device",
    "TileKind",
    "UnknownDevice",
    "devices",
    "from_name",
    "get_current_device",
    "set_current_device",
    "using_device",
]
