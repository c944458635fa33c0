"""Kernels: the `Kernel` base class users subclass, and iron's kernel library, one module per
family (library.py: elementwise, matrix, row and conversion kernels; conv.py: convolution and
pooling; attention.py: fused attention). A kernel describes and computes one call; where it runs
is the compiler's decision.
"""
from iron.kernels import attention, conv, library
from iron.kernels.attention import Attention
from iron.kernels.base import Kernel, Role, Within
from iron.kernels.conv import AvgPool2D, Conv2D, MaxPool2D
from iron.kernels.library import (
    Accumulate,
    Add,
    Argmax,
    ArgmaxBlocks,
    Cast,
    Concat,
    Copy,
    Dequant,
    Exp,
    MatMul,
    MatMulAccumulate,
    MatVec,
    Max,
    Mul,
    ReLU,
    Requantize,
    RMSNorm,
    RoPE,
    Scale,
    SiLU,
    Softmax,
    Sub,
    concat,
)

LIBRARY = library.LIBRARY + conv.CONV + attention.ATTENTION   # every library kernel, by family

__all__ = [
    "LIBRARY",
    "Accumulate",
    "Add",
    "Argmax",
    "ArgmaxBlocks",
    "Attention",
    "AvgPool2D",
    "Cast",
    "Concat",
    "Conv2D",
    "Copy",
    "Dequant",
    "Exp",
    "Kernel",
    "MatMul",
    "MatMulAccumulate",
    "MatVec",
    "Max",
    "MaxPool2D",
    "Mul",
    "RMSNorm",
    "ReLU",
    "Requantize",
    "RoPE",
    "Role",
    "Scale",
    "SiLU",
    "Softmax",
    "Sub",
    "Within",
    "concat",
]
