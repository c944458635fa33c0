"""The FIFOs a group's cores take by DMA (`takes`) and the rule built on them,
`unsplit_beside_producer` (docs/platform.md section 4)."""
from __future__ import annotations

from iron.compiler.fuse import Group
from iron.compiler.matrices import host_matrix, senders, splittable
from iron.ir import MemoryKind, Node, Op, external_inputs, is_host_tensor, storage, tensor_inputs

FORWARD_BYTES = 4096   # the largest host tensor one group forwards to later readers


def unsplit_beside_producer(groups: tuple[Group, ...], number: int, outside, sites: list, device) -> str:
    """`unsplit_beside_producer` (why, or ""): a split group's parts receive every other group's
    result by DMA (a FIFO to several tiles is never shared memory), so a group that could split
    stays on one tile when its parts would take more FIFOs by DMA than a compute tile has input
    channels, or when the next group, its one reader, would take one too many: on one tile,
    `snake_order` puts that group beside it, reading its result through shared memory."""
    group, limit = groups[number], device.compute.dma_in_channels
    if not splittable(group, outside):
        return ""
    mine = takes(groups, group, sites)
    if len(mine) > limit:
        return (f"not split: each part would take {len(mine)} FIFOs by DMA ({', '.join(mine)}) but a compute "
                f"tile has {limit} input channels; on one tile beside the group before it, it reads that "
                "group's result through shared memory")
    reader = groups[number + 1] if number + 1 < len(groups) else None
    readers = {u for c in group.calls for u in outside.get(c, ())}
    if reader is None or readers != {reader.name}:
        return ""
    theirs = takes(groups, reader, sites)
    if not limit < len(theirs) <= limit + 1:
        return ""
    return (f"not split: {reader.name}, the one group reading its result, would take {len(theirs)} FIFOs by "
            f"DMA ({', '.join(theirs)}) but a compute tile has {limit} input channels; on one tile, with "
            f"{reader.name} beside it, its result goes through shared memory")


def takes(groups: tuple[Group, ...], group: Group, sites: list) -> list[str]:
    """The FIFOs a core of `group` takes by DMA unless shared memory spares one: each other
    group's result but those another of them on one tile reads too and so can forward
    (`fit_compute_channels`), and each group on one tile forwarding it a small host tensor
    (`forward_shared_input`); its host matrix's rows; its `_in`."""
    matrix = host_matrix(group)
    host = [n for n in external_inputs(group.calls) if is_host_tensor(n) and n is not matrix]
    one_tile = [s for s in sites if len(s.tiles) == 1]
    loaders = [next((s.group.name for s in one_tile if forwardable(n)
                     and any(n in tensor_inputs(c) for c in s.group.calls)), None) for n in host]
    by_name, sending = {g.name: g for g in groups}, senders(groups, group)
    relayed = {r for s in one_tile if s.group.name in sending for r in senders(groups, by_name[s.group.name])}
    sending = [g for g in sending if g not in relayed]
    sending += [g for g in dict.fromkeys(loaders) if g is not None and g not in sending]
    return ([f"{g}'s result" for g in sending] + ["its rows"] * (matrix is not None)
            + ["its host tensors"] * (None in loaders))


def forwardable(node: Node) -> bool:
    """A host tensor one group may forward to others: an input, weight or param (or a view of
    one) of at most FORWARD_BYTES."""
    base = storage(node)
    constant = base.op == Op.INPUT or base.arg.kind in (MemoryKind.WEIGHT, MemoryKind.PARAM)
    return constant and node.size * node.dtype.itemsize <= FORWARD_BYTES
