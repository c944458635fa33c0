"""The named exceptions iron raises, one per kind of mistake, all deriving from `IronError`. Their
messages name the user's own parameters, states and kernels, give the values involved and end
with one sentence on the fix. This module imports nothing from iron, so every layer can raise them.
"""
import aie_utils


class IronError(Exception):
    """Base class of every error iron raises on purpose."""


class SignatureError(IronError, TypeError):
    """A body() parameter is declared in a way iron cannot trace (kind, annotation, type)."""


class DeclarationError(IronError, ValueError):
    """A weight, param or state declaration is malformed."""


class CarryError(IronError, TypeError, ValueError):
    """The body's iron.carry(...) is missing, misplaced, or does not match its Carried parameters,
    or a Carry is changed in place. A TypeError as in IRON (and a ValueError, as iron raised before)."""


class TracedValueError(IronError, TypeError):
    """A per-call value (known only on the device) was used as a Python bool, int or index, or a
    handle was used outside the trace that made it."""


class ArgumentError(IronError, TypeError):
    """A call got a missing or unexpected per-call value, or a tensor of the wrong shape or dtype."""


class IndexOutOfRange(IronError, IndexError):
    """A per-call index fell outside the tensor it indexes: checked before anything is written, or in
    a device loop flagged by the Emit, which clamps it into range on the device (the flagged run's
    state writes go to a sink, not into a state)."""

    @classmethod
    def at(cls, what: str, expr: str, value: int, lo: int, hi: int, tensor: str = "") -> "IndexOutOfRange":
        """The one text every path uses: `what` is the user's view (`trail[steps]`) or bounded
        attribute (`Softmax length=n`), `expr` the per-call expression, [lo, hi) the valid
        range, `tensor` the name of the tensor a view indexes ('' for an attribute)."""
        return cls(f"{_range(what, expr, value, lo, hi)}; nothing was written. {_fix(expr, lo, hi, tensor)}")

    @classmethod
    def in_loop(cls, step: int, drained: int, what: str, expr: str, value: int, lo: int, hi: int,
                tensor: str = "", by_host: bool = False) -> "IndexOutOfRange":
        """The device's Emit flagged body step `step`'s index (or, `by_host`, the host computed it
        before starting the step); `drained` runs were already in flight (from that step on) and
        ran with their indices clamped into range, their state writes sent to a sink."""
        who = "The host computed it" if by_host else "The device's Emit flagged it"
        flagged = f"{_range(what, expr, value, lo, hi)}. {who}"
        if not drained:
            ran = f"{flagged} before step {step} ran, and the loop stopped: nothing was written by step {step}, and"
        else:
            steps = f"step {step}" if drained == 1 else f"steps {step}..{step + drained - 1}"
            its = "its" if drained == 1 else "their"
            ran = (f"{flagged} and clamped it to {min(max(value, lo), hi - 1)}, and the loop stopped: {steps}, already "
                   f"in flight, ran with {its} indices clamped into range and {its} state writes sent to a sink, "
                   "not into a state, and")
        return cls(
            f"CarriedLoop step {step}: {ran} loop.transitions and loop.carry describe the runs before step {step}. "
            f"{_fix(expr, lo, hi, tensor)}"
        )


class WriteHazard(IronError, ValueError):
    """Two nodes of one call touch the same state memory in an order the device cannot keep."""


class KernelTypeError(IronError, TypeError):
    """A kernel was given operands of shapes or dtypes it does not accept."""


class UnknownDevice(IronError, aie_utils.UnknownDevice):
    """A device name or column count that is not in the catalog (the device catalog's own error,
    as iron raises it)."""


class DoesNotFit(IronError, MemoryError):
    """A design's buffers do not fit the memory of the tile they were placed on. `fact`: the
    compiler's typed refusal its text is printed from (iron/plan/rules.py), when it has one."""

    def __init__(self, message, fact=None):
        super().__init__(message)
        self.fact = fact

    @classmethod
    def of(cls, fact) -> "DoesNotFit":
        return cls(str(fact), fact)


class PlacementError(IronError, ValueError):
    """A design needs more tiles, channels or buffer descriptors than the device has."""


class ToolchainMissing(IronError, RuntimeError):
    """A build tool (aiecc, Peano, a host C++ compiler) is not installed."""


class BuildError(IronError, RuntimeError):
    """A build tool ran and failed; the message carries its stderr."""


class CacheError(IronError, RuntimeError):
    """iron's cache directory cannot be used: not a directory, not writable, or (for native
    kernels) writable by another account."""


class TraceError(IronError, ValueError):
    """A timeline's path (`trace=`, IRON_TRACE) that cannot be written: checked before anything runs."""


class BackendUnavailable(IronError, RuntimeError):
    """The requested backend (XRT, an NPU) is not present on this machine."""


class DeviceHang(IronError, RuntimeError):
    """A run would wait forever on the device: what the sequence moves does not match what the cores acquire."""


class DeviceTimeout(IronError, RuntimeError):
    """A run on a real NPU did not complete in time."""


class LoopError(IronError, ValueError):
    """A CarriedLoop cannot be built or run as asked."""


class PlanError(IronError, RuntimeError):
    """A Plan breaks a device rule (DMA limits, a BD id reused too early, a malformed program)."""


class ModelFileError(IronError, RuntimeError):
    """A model file (GGUF) is missing, cannot be fetched or read, or is not the model expected."""


class TokenError(IronError, ValueError):
    """A token id outside the model's vocabulary, or more tokens than the model's context holds."""


def _range(what: str, expr: str, value: int, lo: int, hi: int) -> str:
    return f"{what} with {expr} = {value} is out of range: {expr} must be in {lo}..{hi - 1}"


def _fix(expr: str, lo: int, hi: int, tensor: str) -> str:
    return f"Keep {expr} in range, or make '{tensor}' larger." if tensor else f"Keep {expr} between {lo} and {hi - 1}."
