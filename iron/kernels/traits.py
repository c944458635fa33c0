"""What a kernel computes, as the compiler needs to know it, declared the way JAX declares a
rule per primitive: an index map in einsum's notation (`"mk,kn->mn"`: each input's axes, then
the output's, by letter), the axes each output element reads whole (`reduces`), the axes it
reads only up to a per-call `length`, the axes input 0 stores packed (`packed`: GGUF blocks of
`BLOCK_ELEMENTS` elements in `block_bytes` bytes, so that axis's extent in the stored tensor is
bytes, not elements, and it is tied to no other tensor's axis), and whether it maps zeros to
zeros. A map's letters name a
tensor's last axes; a tensor with fewer axes lacks the leading ones (RMSNorm's `"rc,c->rc"` on a
row x (n,)), one with more repeats the map over the leading ones (an elementwise `"i->i"` over
any shape). The `Role` fusion and placement read is derived from these, never declared."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from iron.errors import DeclarationError

BLOCK_ELEMENTS = 32   # the elements of one GGUF block (Q4_1, Q8_0) a packed axis stores


class Role(Enum):
    """What a kernel does with its data, derived from its index map (`role_of`)."""

    OTHER = "other"                  # no map: nothing assumed, the call fuses by the general rules only
    ELEMENTWISE = "elementwise"      # "i,i->i": output element i depends only on element i of each input
    MATRIX = "matrix"                # "mk,kn->mn", "mk,k->m": output row m reads A's row m, K contracted
    ROW_REDUCTION = "row reduction"  # "rc->r", "rc,c->rc": reads each whole row before writing its output
    EXPANSION = "row expansion"      # "rb->rc": output row r is input row r expanded (Dequant's blocks)


# The maps each role has in the library, quoted when a kernel declares a role instead of a map.
EXAMPLES = {Role.ELEMENTWISE: "i,i->i", Role.MATRIX: "mk,kn->mn", Role.ROW_REDUCTION: "rc->r",
            Role.EXPANSION: "rb->rc"}


@dataclass(frozen=True)
class IndexMap:
    """A parsed index map: each input's axis letters and the output's."""

    inputs: tuple[str, ...]
    output: str

    @classmethod
    def parse(cls, text: str, owner: str) -> IndexMap:
        """The map `text` declares (`owner`: the kernel, for the error), refused when malformed."""
        sides = text.replace(" ", "").split("->")
        ins = sides[0].split(",") if len(sides) == 2 else []
        if not ins or not all(s.isalpha() and s.islower() and len(set(s)) == len(s) for s in (*ins, sides[-1] or "x")):
            raise DeclarationError(
                f"kernel {owner} declares index_map = {text!r}: write each input's axes, then the output's, as "
                "distinct lowercase letters in einsum's notation, e.g. 'mk,kn->mn' (MatMul), 'i,i->i' (Add), "
                "'rc->r' (Max of each row).")
        return cls(tuple(ins), sides[1])

    @property
    def letters(self) -> frozenset[str]:
        return frozenset("".join(self.inputs) + self.output)

    @property
    def dropped(self) -> str:
        """The input axes the output lacks, in order of first use."""
        return "".join(dict.fromkeys(a for s in self.inputs for a in s if a not in self.output))

    @property
    def made(self) -> str:
        """The output axes no input has (an expansion's)."""
        return "".join(a for a in self.output if not any(a in s for s in self.inputs))

    def __str__(self) -> str:
        return f"{','.join(self.inputs)}->{self.output}"


@dataclass(frozen=True)
class Traits:
    """A kernel's declared computation: its map, the axes each output element reads whole, those
    read only up to a per-call length, whether it keeps zeros; and the Role they make it."""

    index_map: IndexMap | None
    reduces: str
    length_axes: str
    keeps_zeros: bool
    packed: str = ""   # input 0's axes stored in blocks of BLOCK_ELEMENTS elements of `block_bytes` bytes

    @property
    def role(self) -> Role:
        """ELEMENTWISE: every input has the output's axes and nothing is reduced; EXPANSION: the
        output has an axis no input has; MATRIX: input 0 is (m, k), its k contracted with another
        input's, m the output's first axis; ROW_REDUCTION: input 0's last axis is reduced."""
        m = self.index_map
        if m is None:
            return Role.OTHER
        if m.made:
            return Role.EXPANSION
        if not self.reduces and all(s == m.output for s in m.inputs):
            return Role.ELEMENTWISE
        a = m.inputs[0]
        if len(a) == 2 and a[1] in m.dropped and m.output[:1] == a[0] and any(a[1] in s for s in m.inputs[1:]):
            return Role.MATRIX
        if a and a[-1] in self.reduces:
            return Role.ROW_REDUCTION
        return Role.OTHER

    @property
    def row_length(self) -> bool:
        """Whether each row is reduced only over its first `length` elements (the rest never read)."""
        return bool(self.index_map) and self.index_map.inputs[0][-1:] == self.length_axes[-1:] != ""


def declared_traits(cls) -> Traits:
    """The Traits kernel class `cls` declares, checked against its arity and attributes."""
    if "role" in cls.__dict__:
        role = cls.__dict__["role"]
        example = EXAMPLES.get(role, "i->i")
        raise DeclarationError(
            f"kernel {cls.__name__} declares role = {role}: a kernel's Role is derived from what it computes. "
            f"Declare index_map instead (e.g. index_map = {example!r} for {getattr(role, 'value', role)}), with "
            "reduces= for axes each output element reads whole and length_axes= for those read up to a per-call "
            "length.")
    text = cls.index_map
    if text is None:
        return Traits(None, "", "", cls.keeps_zeros)
    m = IndexMap.parse(text, cls.__name__)
    if len(m.inputs) != cls.arity:
        raise DeclarationError(
            f"kernel {cls.__name__} declares index_map = {text!r} of {len(m.inputs)} inputs, but arity = {cls.arity}: "
            "give one axis list per tensor input.")
    reduces = m.dropped if cls.reduces is None else cls.reduces
    for name, axes in (("reduces", reduces), ("length_axes", cls.length_axes)):
        if not set(axes) <= m.letters:
            raise DeclarationError(
                f"kernel {cls.__name__} declares {name} = {axes!r}, but its index_map {text!r} has no axis "
                f"{''.join(sorted(set(axes) - m.letters))}: name axes of the map.")
    if not set(cls.packed) <= set(m.inputs[0]) or (cls.packed and "block_bytes" not in cls.attrs):
        raise DeclarationError(
            f"kernel {cls.__name__} declares packed = {cls.packed!r}: name axes of input 0's map "
            f"({m.inputs[0]!r}) and take the bytes of a block as the attr block_bytes.")
    if cls.length_axes and ("length", "i32") not in cls.c_attrs:
        raise DeclarationError(
            f"kernel {cls.__name__} declares length_axes = {cls.length_axes!r} but takes no length: add "
            "('length', 'i32') to c_attrs (and length to attrs).")
    return Traits(m, reduces, cls.length_axes, cls.keeps_zeros, cls.packed)
