"""Kernels: the `Kernel` base class users subclass, and iron's kernel library.

Kernels describe and compute one call; they do not place, fuse or schedule themselves."""
from iron.kernels.base import Kernel, Role, Within
from iron.kernels.library import (
    LIBRARY,
    Accumulate,
    Add,
    Argmax,
    Cast,
    Copy,
    Exp,
    MatMul,
    MatVec,
    Mul,
    ReLU,
    Requantize,
    RMSNorm,
    Scale,
    SiLU,
    Softmax,
    Sub,
)

__all__ = [
    "LIBRARY",
    "Accumulate",
    "Add",
    "Argmax",
    "Cast",
    "Copy",
    "Exp",
    "Kernel",
    "MatMul",
    "MatVec",
    "Mul",
    "RMSNorm",
    "ReLU",
    "Requantize",
    "Role",
    "Scale",
    "SiLU",
    "Softmax",
    "Sub",
    "Within",
]
