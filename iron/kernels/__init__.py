"""Kernels: the `Kernel` base class users subclass, and iron's kernel library."""
from iron.kernels.base import Kernel
from iron.kernels.library import (
    Accumulate, Add, Argmax, Copy, Exp, LIBRARY, MatMul, MatVec, Mul, ReLU, RMSNorm, Scale, SiLU,
    Softmax, Sub,
)

__all__ = [
    "Kernel", "Copy", "Add", "Sub", "Mul", "Scale", "ReLU", "SiLU", "Exp", "Accumulate", "MatVec",
    "MatMul", "RMSNorm", "Softmax", "Argmax", "LIBRARY",
]
