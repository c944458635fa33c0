"""The size rules a declared or per-call tensor meets before anything is traced or allocated.

Every axis is a positive int; a tensor's bytes fit a signed 32-bit word, so every byte offset
into it does too (DMA offsets are 32-bit words: patched into an xclbin's instructions as a byte
offset, computed by the Emit in int32 words; kernel sizes are i32 operands; docs/platform.md
sections 3, 5 and 9); and a graph's states, one host buffer which iron also holds as the
reference's copy, stay within that and a host budget: `IRON_STATE_MAX_BYTES`, 256 MiB by default.
Each rule raises the error class its caller names, with the numbers.
"""
from __future__ import annotations

import os

import numpy as np

from iron import dtypes
from iron.errors import DeclarationError

I32_LIMIT = 2**31 - 1
STATE_BUDGET_VARIABLE = "IRON_STATE_MAX_BYTES"
DEFAULT_STATE_BUDGET = 256 * 2**20


def checked_shape(what: str, shape, error=DeclarationError) -> tuple[int, ...]:
    """`shape` as a tuple of positive ints (an int is one axis; () is one element)."""
    axes = (shape,) if isinstance(shape, (int, np.integer)) else shape
    try:
        axes = tuple(axes)
    except TypeError:
        raise error(f"{what} has shape {shape!r}: give a tuple of positive ints.") from None
    if any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s <= 0 for s in axes):
        raise error(f"{what} has shape {shape!r}: every axis needs a positive int size.")
    return tuple(int(s) for s in axes)


def fits_device(what: str, shape: tuple[int, ...], dtype, error=DeclarationError) -> int:
    """The tensor's bytes, when every byte offset into it fits a signed 32-bit word."""
    nbytes = int(np.prod(shape, dtype=object)) * np.dtype(dtype).itemsize
    if nbytes > I32_LIMIT:
        raise error(
            f"{what} is {shape} {dtypes.name(dtype)}: {nbytes} bytes, but the device's DMA offsets are "
            f"32-bit words, so a tensor may hold at most {I32_LIMIT} bytes. Split it into smaller tensors."
        )
    return nbytes


def state_budget() -> int:
    """The most bytes of states one graph may declare (`IRON_STATE_MAX_BYTES`, else 256 MiB)."""
    text = os.environ.get(STATE_BUDGET_VARIABLE)
    if text is None:
        return DEFAULT_STATE_BUDGET
    try:
        budget = int(text)
    except ValueError:
        budget = 0
    if budget <= 0:
        raise DeclarationError(f"{STATE_BUDGET_VARIABLE} is {text!r}: set it to a positive number of bytes.")
    return budget


def within_budget(what: str, nbytes: int, error=DeclarationError) -> None:
    """Refuse states of more than the budget's bytes."""
    budget = state_budget()
    if nbytes > budget:
        raise error(
            f"{what} would take {nbytes} bytes, more than the {budget} bytes a graph's states may take on the host "
            f"(iron holds them twice: the reference's copy and the device's buffer). Use smaller states, or "
            f"raise {STATE_BUDGET_VARIABLE}."
        )


def states_fit(where: str, states: list[tuple[tuple[int, ...], np.dtype]], error) -> None:
    """A graph's states together: one host buffer of whole 32-bit words, addressable and within
    the budget."""
    nbytes = sum(-(-int(np.prod(shape, dtype=object)) * np.dtype(dtype).itemsize // 4) * 4 for shape, dtype in states)
    if nbytes > I32_LIMIT:
        raise error(
            f"the states of {where} need {nbytes} bytes in one host buffer, but the device's DMA offsets "
            f"are 32-bit words, so it may hold at most {I32_LIMIT} bytes: use smaller states."
        )
    within_budget(f"the states of {where}", nbytes, error)
