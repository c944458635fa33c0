"""`smollm2.load(layers=...)` takes an int or None; anything else is an ArgumentError naming the
argument and the fix, before any model file is looked for (issue 25 item 12)."""
import numpy as np
import pytest

from iron.errors import ArgumentError
from iron.models import smollm2
from tests.models.test_loading import tiny_llama


@pytest.mark.parametrize("layers", [2.5, "2", True, np.float32(2)])
def test_load_with_layers_not_an_int_is_an_argument_error_before_any_file_is_read(layers, tmp_path, monkeypatch):
    monkeypatch.setattr(smollm2, "model_path", lambda: pytest.fail("the packaged model was looked for"))
    with pytest.raises(ArgumentError) as raised:
        smollm2.load(tmp_path / "absent.gguf", layers=layers)
    assert str(raised.value) == (
        f"load(layers={layers!r}): layers is how many decoder blocks to keep, an int (such as 2), or None for all."
    )
    with pytest.raises(ArgumentError):
        smollm2.load(layers=layers)


def test_load_takes_a_numpy_integer_as_layers(tmp_path):
    model = smollm2.load(tiny_llama(tmp_path / "tiny.gguf"), layers=np.int64(1))
    assert (model.config.layers, len(model.weights.blocks)) == (1, 1)
