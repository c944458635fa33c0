"""Reading a GGUF model file: its metadata and its tensors, raw as they ship.

The `gguf` package parses the file; this module turns what it reads into plain values (a
metadata dict and GGUFTensor records whose arrays are in numpy order, (out, in) for a matrix) and
every fault of the file into a ModelFileError.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from iron.errors import ModelFileError
from iron.models.blocks import FORMATS, BlockFormat


@dataclass(frozen=True)
class GGUFTensor:
    """One tensor of the file. `data` is float32 of `shape` for an F32 tensor, and for a block
    format the raw uint8 rows of blocks, (shape[0], bytes per row), as they lie in the file."""

    name: str
    kind: str
    shape: tuple[int, ...]
    data: np.ndarray

    @property
    def format(self) -> BlockFormat | None:
        return FORMATS.get(self.kind)

    def dequantize(self) -> np.ndarray:
        """The tensor as float32 of `shape`."""
        fmt = self.format
        return np.array(self.data, dtype=np.float32) if fmt is None else fmt.dequantize(self.data)


@dataclass(frozen=True)
class GGUFFile:
    path: Path
    metadata: dict[str, object]
    tensors: dict[str, GGUFTensor]


def read_gguf(path: str | Path, fix: str) -> GGUFFile:
    """Read a GGUF file; `fix` is the sentence a ModelFileError ends with."""
    import gguf  # the optional [model] extra; only model loading needs it

    path = Path(path)
    if not path.is_file():
        raise ModelFileError(f"no model file at {path}. {fix}")
    try:
        reader = gguf.GGUFReader(path)
        metadata = {name: field.contents() for name, field in reader.fields.items()}
        tensors = [_tensor(t) for t in reader.tensors]
    except (OSError, ValueError, IndexError, KeyError) as e:
        raise ModelFileError(f"{path} is not a readable GGUF file ({e}). {fix}") from None
    unknown = sorted({t.kind for t in tensors} - {"F32", *FORMATS})
    if unknown:
        raise ModelFileError(
            f"{path} holds tensors of kind {', '.join(unknown)}; iron reads F32, "
            f"{', '.join(FORMATS)} tensors. {fix}"
        )
    return GGUFFile(path, metadata, {t.name: t for t in tensors})


def _tensor(t) -> GGUFTensor:
    shape = tuple(int(n) for n in reversed(t.shape))
    return GGUFTensor(t.name, t.tensor_type.name, shape, t.data)
