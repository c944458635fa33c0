"""`Rule`: every named rule by which the compiler decides, as one enum. `plan.rules` holds
(Rule, text) pairs: tests and tools select decisions by member, describe() prints the member's
value and the text; docs/architecture.md ("Who decides what") says what each one decides. A new
rule is a new member here, never a string. The layout pass's decisions are typed facts instead
of text: one small frozen dataclass per kind (`PaddedGrid`, `PaddedStream`, ...), holding its
Rule, the calls by label ("MatMul#0"), the tensors as describe() names them, shapes as they lie
and what fills the padding (`Fill`), printed by its `__str__`; tests compare the facts."""
from __future__ import annotations

from dataclasses import dataclass

from iron.ir import Term


class Rule(Term):
    # before fusion, on the Program (copies.py, through_ddr.py)
    COPY_VIEW_FOR_GRID = "copy_view_for_grid"
    SCATTER_INTO_STATE = "scatter_into_state"
    TILE_BEFORE_STATE_WRITE = "tile_before_state_write"
    THROUGH_BETWEEN_GROUPS = "through_between_groups"
    CARRY_FROM_EARLIER_SEGMENT = "carry_from_earlier_segment"
    # fusion: what closes a group (fuse.py)
    DEQUANT_BEFORE_MATVEC = "dequant_before_matvec"
    MATRIX_OP_STARTS_GROUP = "matrix_op_starts_group"
    REDUCTION_ENDS_GROUP = "reduction_ends_group"
    STATE_WRITE_ENDS_GROUP = "state_write_ends_group"
    GATHER_STARTS_GROUP = "gather_starts_group"
    INPUT_LIMIT = "input_limit"
    SIZE_LIMIT = "size_limit"
    UNRELATED_STARTS_GROUP = "unrelated_starts_group"
    # padding (layout.py, sides.py, padding.py, words.py)
    PAD_TO_BLOCK = "pad_to_block"
    PAD_SHARED_INPUT = "pad_shared_input"
    PAD_SHARED_STREAM = "pad_shared_stream"
    PAD_JOINED = "pad_joined"
    PAD_SQUARE = "pad_square"
    PAD_K_ONLY = "pad_k_only"
    PAD_M_TO_WORDS = "pad_m_to_words"
    PAD_WIDER = "pad_wider"
    PAD_WRITTEN_BY_PRODUCER = "pad_written_by_producer"
    PAD_THROUGH_ZEROS = "pad_through_zeros"
    PAD_THROUGH_ELEMENTWISE = "pad_through_elementwise"
    PAD_THROUGH_MATMUL = "pad_through_matmul"
    PAD_THROUGH_MATMUL_B = "pad_through_matmul_b"
    PAD_THROUGH_ROW_WIDTH = "pad_through_row_width"
    PAD_THROUGH_ROWS = "pad_through_rows"
    PAD_UPSTREAM_ZEROS = "pad_upstream_zeros"
    PAD_UPSTREAM_ROWS = "pad_upstream_rows"
    PAD_PASSED_ON = "pad_passed_on"
    PAD_ROW_REGION = "pad_row_region"
    PAD_TILE_REGION = "pad_tile_region"
    PAD_ROWS_TO_WORDS = "pad_rows_to_words"
    PAD_LEAD_TO_WORDS = "pad_lead_to_words"
    # placement and tiling (place.py, matrices.py, tiling.py, streaming.py, allocate.py)
    SNAKE_ORDER = "snake_order"
    COLUMNS_FOR_LATER_GROUPS = "columns_for_later_groups"
    FEWER_ROWS_FOR_ONE_CONFIGURATION = "fewer_rows_for_one_configuration"
    STREAM_LARGE_MATRIX = "stream_large_matrix"
    SHARE_STREAMED_MATRIX = "share_streamed_matrix"
    SPLIT_MATRIX_OVER_TILES = "split_matrix_over_tiles"
    STREAM_OVER_SHIM_CHANNELS = "stream_over_shim_channels"
    UNSPLIT_BESIDE_PRODUCER = "unsplit_beside_producer"
    TILE_MATMUL_OVER_ARRAY = "tile_matmul_over_array"
    WHOLE_ROWS_WHEN_NOT_WORDS = "whole_rows_when_not_words"
    STREAM_ELEMENTWISE = "stream_elementwise"
    STREAM_CONTIGUOUS_VIEWS = "stream_contiguous_views"
    STREAM_VIEW_ROWS = "stream_view_rows"
    STREAM_INTO_STATE = "stream_into_state"
    STREAM_EVERY_RESULT = "stream_every_result"
    STREAM_JOINED = "stream_joined"
    STREAM_ROW_BLOCKS = "stream_row_blocks"
    ROWS_DO_NOT_STREAM = "rows_do_not_stream"
    STREAM_EXPANSION_UNITS = "stream_expansion_units"
    CHECK_ROWS_FIT = "check_rows_fit"
    FIX_FOR_TILE = "fix_for_tile"
    # routing and lowering (route.py, objects.py)
    FORWARD_SHARED_INPUT = "forward_shared_input"
    FIT_COMPUTE_CHANNELS = "fit_compute_channels"
    GATHER_STRIDED_VIEW = "gather_strided_view"
    # shim channels (channels.py, shims.py)
    SHARE_SHIM_CHANNELS = "share_shim_channels"
    EMIT_IN_SHARES = "emit_in_shares"
    SHIM_CHANNELS = "shim_channels"
    SHIM_CHANNELS_BOUND = "shim_channels_bound"
    # segments (segment.py)
    FEWEST_BYTES_CUT = "fewest_bytes_cut"
    EMIT_OWN_SEGMENT = "emit_own_segment"
    SAME_STRUCTURE_SAME_FIT = "same_structure_same_fit"
    SETTLE_THE_CUT = "settle_the_cut"
    # repetition over time (repeat.py)
    REPEAT_OVER_TIME = "repeat_over_time"
    REPEAT_WITHIN_ITERATION = "repeat_within_iteration"
    SHARE_CORE_IN_ITERATION = "share_core_in_iteration"


Decision = tuple[Rule, object]   # one line of plan.rules: the rule and what it decided (text, or a typed fact)


class Fill(Term):
    """What a padded tensor's padding holds, as its readers may rely on it."""

    ZEROS = "zeros"            # the zeros its buffer is made with: the host writes the user's region only
    WRITTEN = "unwritten"      # zeros too: its producer writes the user's region only (`pad_written_by_producer`)
    KEPT = "kept zeros"        # zeros computed from zeros by kernels that keep them (`pad_through_zeros`)
    ROWS = "reduced zeros"     # zeros a row reduction writes past each row's length (`pad_upstream_rows`)
    COMPUTED = "computed"      # values computed from the padding (Exp(0) = 1): read as the user's region only


@dataclass(frozen=True)
class ZeroFill:
    """The zero-fill lattice's value for one computed tensor (sides.zero_fills): per axis, what
    its padding holds when its group computes it over inputs lying padded (None: not zeros); the
    call that first maps zeros to other values on the way (a Node, None when none does); and why
    its group may not write it in its user's region only at the padded stride ("" when it may:
    its padding then the buffer's zeros, `pad_written_by_producer`)."""

    axes: tuple[Fill | None, ...]
    unkept: object = None
    unwritten: str = ""

    @property
    def fill(self) -> Fill:
        """One Fill for the whole tensor: a row reduction's zeros past each row's length, else
        the weakest of its axes."""
        return next((f for f in (Fill.ROWS, None, Fill.KEPT) if f in self.axes), Fill.ZEROS) or Fill.COMPUTED


@dataclass(frozen=True)
class Lies:
    """One padded tensor's layout: the shape it lies in (the user's region in its first rows and
    columns) and what fills the rest."""

    shape: tuple[int, ...]
    fill: Fill = Fill.ZEROS


Sides = tuple[int, int, int]


def _names(names) -> str:
    return ", ".join(names)


@dataclass(frozen=True)
class PaddedGrid:
    """A MatMul or MatVec computing on padded sides (M, K, N; a MatVec's N is 1): `own` ->
    `sides`, by `rule`: pad_to_block, pad_k_only (M and N its own: its result keeps its shape),
    pad_m_to_words (a MatVec's M to whole words of results), pad_wider (a quantum of K_QUANTUM);
    `fills`: what the padding of A and of B holds (K's must be zeros in both)."""

    group: str
    call: str
    own: Sides
    sides: Sides
    rule: Rule = Rule.PAD_TO_BLOCK
    fills: tuple[Fill | None, Fill | None] = (Fill.ZEROS, Fill.ZEROS)

    def __str__(self) -> str:
        changed = ", ".join(f"{n} {a} -> {b}" for n, a, b in zip("MKN", self.own, self.sides) if a != b)
        fills = ", ".join(f"of {op}: {fill.value}" for op, fill in zip("AB", self.fills) if fill is not None)
        result = "its result keeps its own shape" if self.rule is Rule.PAD_K_ONLY else \
            "its result's padding is computed from zeros, never read as the user's region"
        return f"{self.group}: {self.call} padded ({changed}); padding {fills}; {result}"


@dataclass(frozen=True)
class Unpadded:
    """A MatMul or MatVec whose sides are not multiples of their quanta left on them, and why."""

    group: str
    call: str
    why: str
    rule = Rule.PAD_TO_BLOCK

    def __str__(self) -> str:
        return f"{self.group}: {self.call} is not padded: {self.why}"


STREAMED = {   # how a stream's tensors came to lie padded, by rule
    Rule.PAD_TO_BLOCK: "padded with zeros; the host writes and reads the user's region",
    Rule.PAD_THROUGH_ELEMENTWISE: "as a padded product's result lies, the other inputs padded with zeros; each "
                                  "element of the padding computed from padding, only the user's region read",
    Rule.PAD_PASSED_ON: "as elementwise calls over a padded product's layout left it, each element of the padding "
                        "computed from padding, only the user's region read",
    Rule.PAD_UPSTREAM_ZEROS: "padded with zeros: its kernels keep zeros, so the padding a padded MatMul sums over "
                             "is zeros",
    Rule.PAD_THROUGH_ROWS: "as a padded product's rows lie, each row its own width; only the user's rows read",
    Rule.PAD_THROUGH_ROW_WIDTH: "as a padded product's rows lie, wider: its kernel reduces each row's first (the "
                                "user's) elements only, never the padding",
    Rule.PAD_UPSTREAM_ROWS: "padded with zeros to the layout a padded MatMul reads its result in as A: its kernel "
                            "writes 0 past each row's length, and a row of zeros reduces to a finite row",
}


@dataclass(frozen=True)
class PaddedStream:
    """Streamed calls (elementwise, or a row reduction) over tensors lying padded: the result (or
    the rows reduced) of `own` shape lies in `lies`, by `rule` (the keys of STREAMED), in the
    layout of `products` (one or several, `pad_joined`) when they stream over a product's."""

    group: str
    call: str
    own: tuple[int, ...]
    lies: tuple[int, ...]
    rule: Rule = Rule.PAD_TO_BLOCK
    products: tuple[str, ...] = ()

    def __str__(self) -> str:
        layout = f" (the layout of {_names(self.products)})" * bool(self.products)
        return f"{self.group}: {self.call} streams over {self.own} lying padded to {self.lies}{layout}, " \
               f"{STREAMED[self.rule]}"


TENSORS = {   # how a tensor lies padded for calls, by rule
    Rule.PAD_WRITTEN_BY_PRODUCER: "written in its user's region only (by {}), so its padding stays the zeros the "
                                  "buffer is made with",
    Rule.PAD_SHARED_STREAM: "once for {}, each streaming over it",
}


@dataclass(frozen=True)
class PaddedTensor:
    """A tensor lying padded to `lies` for `calls`, by `rule` (the keys of TENSORS): written in its
    user's region only by them (none: the host), row by row at the padded stride; or padded once
    for the streams of them all."""

    tensor: str
    lies: tuple[int, ...]
    calls: tuple[str, ...]
    rule: Rule = Rule.PAD_WRITTEN_BY_PRODUCER

    def __str__(self) -> str:
        return f"{self.tensor} lies padded to {self.lies}, " + TENSORS[self.rule].format(_names(self.calls) or "the host")


@dataclass(frozen=True)
class KeptZeros:
    """Elementwise calls (`by`, and those that passed the layout on to them) over a padded layout
    keep zeros, so the padding of `tensor`, which MatMuls read padded (`read`: "MatMul#2 as A"), is zeros."""

    group: str
    by: tuple[str, ...]
    tensor: str
    lies: tuple[int, ...]
    read: tuple[str, ...]
    rule = Rule.PAD_THROUGH_ZEROS

    def __str__(self) -> str:
        return f"{self.group}: {_names(self.by)} keep zeros, so the padding of {self.tensor} lying padded to " \
               f"{self.lies}, read by {_names(self.read)}, is zeros"


@dataclass(frozen=True)
class Region:
    """Calls reading a padded tensor's user's region only (`rule`: pad_row_region, a row
    reduction of a vector told its length; pad_tile_region, a group fitting a tile, whose DMA
    moves each padded row's first elements)."""

    group: str
    calls: tuple[str, ...]
    tensor: str
    lies: tuple[int, ...]
    rule: Rule = Rule.PAD_TILE_REGION

    def __str__(self) -> str:
        return f"{self.group}: {_names(self.calls)} read {self.tensor} where it lies padded to {self.lies}, its " \
               "user's region only"


@dataclass(frozen=True)
class SharedSides:
    """Products sharing `tensors` (or read as A and B by `pairs`), padded alike to `sides` each
    (in `calls`' order), or left on their own sides (`why`)."""

    tensors: tuple[str, ...]
    calls: tuple[str, ...]
    sides: tuple[Sides, ...]
    pairs: tuple[str, ...] = ()
    why: str = ""
    rule = Rule.PAD_SHARED_INPUT

    def __str__(self) -> str:
        head = f"{_names(self.tensors)} read by {_names(self.calls)}" if self.tensors else \
            f"{_names(self.calls)}, read as A and B by {_names(self.pairs)},"
        if self.why:
            return f"{head} stay unpadded: {self.why}"
        return f"{head} padded alike: " + "; ".join(f"{c} on (M, K, N) = {s}" for c, s in zip(self.calls, self.sides))



# ---- refusals: why a call has no grid or stream, and why pad_to_block did not pad it ---------------

class NotPadded(Term):
    """Why `pad_to_block` left a call unpadded when no decision of the layout names it."""

    NO_PADDED_GRID = "no padded sides have a grid either"
    ELSEWHERE = "the design reads its result or makes its operands elsewhere (another segment)"
    NO_PADDED_LENGTH = "no padded length streams either"

    @property
    def rule(self) -> Rule:
        return Rule.PAD_TO_BLOCK


@dataclass(frozen=True)
class UnpaddedStream:
    """Streamed calls `pad_stream` left on their own length: `calls` (of group `group`) may not lie
    padded (`why`), or, for another group of `of`'s `pad_shared_stream` family (why ""), do not
    stream, and that rule pads an input for every group reading it or for none."""

    group: str
    calls: tuple[str, ...]
    of: str
    why: str = ""

    @property
    def rule(self) -> Rule:
        return Rule.PAD_SHARED_STREAM if self.group != self.of else Rule.PAD_TO_BLOCK

    def __str__(self) -> str:
        if self.why:
            return f"{_names(self.calls)} is not padded: {self.why}"
        return f"{_names(self.calls)} reads an input of {self.of} too and does not stream, and {Rule.PAD_SHARED_STREAM} " \
               "pads an input for every group reading it or for none"


def _because(unpadded) -> str:
    """pad_to_block's decision on a refused call (a fact above, or NotPadded), as a refusal quotes it."""
    return f" ({unpadded.rule}: {unpadded})" if unpadded else ""


@dataclass(frozen=True)
class NoGrid:
    """`tile_matmul_over_array`'s refusal: a MatMul of `sides` (M, K, N) whose B and result take `held`
    bytes, more than a compute tile's `room`, with no grid even on the whole `device`: its blocks
    divide their sides (at most `most` elements) and the largest that do are `largest`; `padded`:
    sides with larger divisors; `unpadded`: pad_to_block's decision not to pad it, when known."""

    design: str
    call: str
    sides: Sides
    dtype: str
    held: int
    room: int
    device: str
    most: int
    largest: Sides
    padded: Sides
    unpadded: object = None
    rule = Rule.TILE_MATMUL_OVER_ARRAY

    def __str__(self) -> str:
        m, k, n = self.sides
        largest = ", ".join(f"{name} = {side}: {block}" for name, side, block in zip("MKN", self.sides, self.largest))
        padded = ", ".join(f"{name} = {side}" for name, side in zip("MKN", self.padded))
        return (f"{self.design}: {self.call} ({m}, {k}) x ({k}, {n}) {self.dtype}: B and the result take {self.held} "
                f"bytes, more than a compute tile's {self.room}, and {self.rule} finds no grid of cores for it even "
                f"on the whole {self.device}: its blocks divide their sides (at most {self.most} elements, no padding "
                "or remainder block) and must fit a core and move in one DMA op each, and the largest dividing blocks "
                f"are {largest}; {Rule.PAD_TO_BLOCK} did not pad it{_because(self.unpadded)}. Pad the matrices with zeros to sides with "
                f"larger divisors ({padded}), or cut the call into several.")


@dataclass(frozen=True)
class NoWholeWords:
    """`stream_elementwise`'s refusal: `calls` over `size` elements taking `held` bytes, more than a
    compute tile's `room`, whose blocks divide `size` and hold whole words (`per_word` elements
    each), of which `size` has none; `unpadded`: pad_to_block's decision, when known."""

    design: str
    calls: tuple[str, ...]
    size: int
    dtype: str
    held: int
    room: int
    per_word: int
    unpadded: object = None
    rule = Rule.STREAM_ELEMENTWISE

    def __str__(self) -> str:
        return (f"{self.design}: {_names(self.calls)} over {self.size} {self.dtype} elements take {self.held} bytes, "
                f"more than a compute tile's {self.room}, and {self.rule} cuts them into blocks that divide "
                f"{self.size} and hold whole 32-bit words ({self.per_word} elements each), of which {self.size} has "
                f"none, and {Rule.PAD_TO_BLOCK} did not pad them{_because(self.unpadded)}. Pad the tensors to "
                f"{-(-self.size // self.per_word) * self.per_word} elements, or cut the calls in two.")


@dataclass(frozen=True)
class TooLarge:
    """A design no cut fits: group `group` (`calls`) alone is too large for one configuration on
    `device`; `alone`: its own refusal (a fact above, or the text of one without); `unpadded`:
    pad_to_block's decision on it when `alone` does not carry it."""

    design: str
    device: str
    calls: tuple[str, ...]
    group: str
    alone: object
    unpadded: object = None
    rule = Rule.FEWEST_BYTES_CUT

    def __str__(self) -> str:
        return (f"{self.design} does not fit {self.device} even cut into segments: {_names(self.calls)} (group "
                f"{self.group}) alone is too large for one configuration{_because(self.unpadded)}. {self.alone}")
