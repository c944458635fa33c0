"""How the benchmarks time two things against each other (imported by them; not a benchmark).

Both sides are timed in alternation, in many short repeats, and each keeps its best, so a busy
moment on a shared machine counts against neither side of a ratio.
"""
import time
import timeit


def race(ours, theirs, number, repeat, warm=0.0):
    """Best per-call times (seconds) of two functions, timed in alternation.

    Before each timing its side runs untimed for `warm` seconds, so it is timed in its steady state:
    its caches warm, and the other side's BLAS worker threads idle again (OpenBLAS keeps them
    busy-waiting about 0.1 s after a multi-threaded call, and on 2 cores they would take the CPU
    from whatever is timed next).
    """
    timers = timeit.Timer(ours), timeit.Timer(theirs)
    best = [float("inf")] * 2
    for _ in range(repeat):
        best = [min(b, _warmed(f, t, number, warm)) for b, f, t in zip(best, (ours, theirs), timers)]
    return best[0] / number, best[1] / number


def _warmed(function, timer, number, warm):
    until = time.perf_counter() + warm
    while time.perf_counter() < until:
        function()
    return timer.timeit(number)
