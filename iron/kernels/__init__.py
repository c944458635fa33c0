"""Kernels: the `Kernel` base class users subclass, and iron's kernel library. A kernel describes
and computes one call; where it runs is the compiler's decision.
"""
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
