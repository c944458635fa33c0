"""The tensor dtypes iron supports, and their names in kernel symbols (suffixes), in MLIR (element
types) and in messages.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

bfloat16 = np.dtype(ml_dtypes.bfloat16)

# dtype -> (kernel symbol suffix, MLIR element type)
_NAMES = {
    np.dtype(np.int8): ("i8", "i8"),
    np.dtype(np.uint8): ("u8", "ui8"),
    np.dtype(np.int16): ("i16", "i16"),
    np.dtype(np.int32): ("i32", "i32"),
    bfloat16: ("bf16", "bf16"),
    np.dtype(np.float32): ("f32", "f32"),
}
SUPPORTED = tuple(_NAMES)
FLOATS = frozenset({bfloat16, np.dtype(np.float32)})
INTEGERS = frozenset(d for d in SUPPORTED if d not in FLOATS)


def as_dtype(value) -> np.dtype | None:
    """The numpy dtype of `value` if iron supports it, else None."""
    try:
        dt = np.dtype(value)
    except TypeError:
        return None
    return dt if dt in _NAMES else None


def suffix(dtype) -> str:
    """The kernel symbol suffix of a dtype: `add_f32`, `matvec_bf16`."""
    return _NAMES[np.dtype(dtype)][0]


def mlir_type(dtype) -> str:
    """The MLIR element type of a dtype."""
    return _NAMES[np.dtype(dtype)][1]


def name(dtype) -> str:
    """The user-facing dtype name (`float32`, `bfloat16`)."""
    return np.dtype(dtype).name


def spelling(dtype) -> str:
    """How Python code names a dtype: `np.float32`, `iron.bfloat16` (numpy has no bfloat16)."""
    return "iron.bfloat16" if np.dtype(dtype) == bfloat16 else f"np.{name(dtype)}"


def supported_text() -> str:
    return ", ".join(name(d) for d in SUPPORTED)


# Significant bits of each float dtype: every integer of magnitude up to 2**bits is exact in it.
_SIGNIFICANT_BITS = {bfloat16: 8, np.dtype(np.float32): 24}


def holds(dtype, into) -> bool:
    """Whether every value of `dtype` is exactly a value of `into` (a Cast to it loses nothing)."""
    dtype, into = np.dtype(dtype), np.dtype(into)
    if dtype == into:
        return True
    if dtype in FLOATS:
        return into in FLOATS and _SIGNIFICANT_BITS[dtype] <= _SIGNIFICANT_BITS[into]
    info = np.iinfo(dtype)
    if into in FLOATS:
        return max(-int(info.min), int(info.max)) <= 2 ** _SIGNIFICANT_BITS[into]
    return np.iinfo(into).min <= info.min and info.max <= np.iinfo(into).max


def lossless_common(given, among) -> np.dtype | None:
    """The first dtype of `among` (in SUPPORTED order) holding every value of each dtype of
    `given`, or None when none does."""
    return next((d for d in SUPPORTED if d in among and all(holds(g, d) for g in given)), None)
