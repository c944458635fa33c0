"""A GGUF model's tokenizer, built from the file's own metadata with the `tokenizers` package.

GGUF's "gpt2" tokenizer is GPT-2 style byte-level BPE: `tokenizer.ggml.tokens` is the
vocabulary, `tokenizer.ggml.merges` the merge rules ("a b"), and the tokens of type CONTROL
(<|endoftext|>, <|im_start|>, ...) are special: written in a prompt, each is one token. Digits
are split one by one before BPE, no space is put before the text and no BOS token is added (as
SmolLM2's own tokenizer does).
"""
from __future__ import annotations

from typing import Sequence

from iron.errors import TokenError

CONTROL = 3  # llama.cpp's token type for special tokens


class Tokenizer:
    """Text to token ids and back."""

    def __init__(self, tokens: Sequence[str], merges: Sequence[str], types: Sequence[int],
                 eos_id: int):
        from tokenizers import AddedToken, decoders, models, pre_tokenizers
        from tokenizers import Tokenizer as BPETokenizer

        bpe = models.BPE(vocab={t: i for i, t in enumerate(tokens)},
                         merges=[tuple(m.split(" ")) for m in merges])
        self._bpe = BPETokenizer(bpe)
        self._bpe.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ])
        self._bpe.decoder = decoders.ByteLevel()
        self._bpe.add_special_tokens([AddedToken(t, special=True, normalized=False)
                                      for t, kind in zip(tokens, types) if kind == CONTROL])
        self.vocab_size = len(tokens)
        self.eos_id = eos_id

    def encode(self, text: str) -> list[int]:
        return self._bpe.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        check_tokens(ids, self.vocab_size)
        return self._bpe.decode(list(ids), skip_special_tokens=False)


def check_tokens(ids: Sequence[int], vocab_size: int) -> None:
    """TokenError naming the first id outside 0..vocab_size-1."""
    for at, token in enumerate(ids):
        if not 0 <= int(token) < vocab_size:
            raise TokenError(
                f"token id {int(token)} (at index {at}) is outside the vocabulary: ids must be in "
                f"0..{vocab_size - 1}. Use the ids the model's tokenizer gives "
                f"(model.tokenizer.encode(text))."
            )
