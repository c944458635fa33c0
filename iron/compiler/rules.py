"""`Rule`: every named rule by which the compiler decides, as one enum. `plan.rules` holds
(Rule, text) pairs: tests and tools select decisions by member, describe() prints the member's
value and the text; docs/architecture.md ("Who decides what") says what each one decides. A new
rule is a new member here, never a string."""
from __future__ import annotations

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
    # padding (layout.py, pad.py, pad_why.py, pad_lines.py, words.py)
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
    SHARE_CORE_IN_ITERATION = "share_core_in_iteration"


Decision = tuple[Rule, str]   # one line of plan.rules: the rule and what it decided, for describe()
