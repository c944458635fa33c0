"""The tokenizer built from the GGUF's metadata: GPT-2 byte-level BPE, digits one by one, no
prefix space, no BOS, control tokens as single ids; text round-trips; bad ids are named."""
import pytest

from iron.errors import TokenError
from tests.quotes import quoted

ROUND_TRIP = [
    "The capital of France is",
    "  two spaces, tabs\tand\nnewlines\n\n",
    "In 1492, 3.14159 and -273.15°C",
    "naïve café, 東京, emoji 🙂, Ωmega",
    "<|im_start|>user\nHi!<|im_end|>\n",
    "def f(x):\n    return x ** 2  # square",
]


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_round_trip(model, text):
    assert model.tokenizer.decode(model.tokenizer.encode(text)) == text


def test_pinned_ids(model):
    tok = model.tokenizer
    assert tok.encode("The capital of France is") == [504, 3575, 282, 4649, 314]
    assert tok.encode("1492") == [33, 36, 41, 34]  # one token per digit
    assert [tok.decode([i]) for i in tok.encode("Hello world")] == ["Hello", " world"]
    assert tok.encode("<|im_start|>user<|im_end|>") == [1, 4093, 2]
    assert (tok.vocab_size, tok.eos_id) == (49152, 2)


def test_id_outside_vocabulary(model):
    with pytest.raises(TokenError) as e:
        model.tokenizer.decode([504, 49152])
    quoted(e.value, "token id 49152", "index 1", "0..49151", "model.tokenizer.encode(text)")
    with pytest.raises(TokenError, match=r"^token id -1 \(at index 0\)"):
        model.tokenizer.decode([-1])
