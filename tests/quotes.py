"""What an error test asserts of a message, beside its type (pytest.raises): that it quotes the
user's names and numbers (the declaration, the tensor, the sizes, the limit) and the name of the
fix, never a whole sentence, so the message may be reworded without breaking a test."""


def quoted(error: BaseException, *names: str) -> str:
    """`error`'s message, which must contain each of `names`."""
    text = str(error)
    missing = [name for name in names if name not in text]
    assert not missing, f"{text!r} does not quote {missing}"
    return text
