"""How the benchmarks time two things against each other (imported by them; not a benchmark).

Both sides are timed in alternation, in many short repeats, and each keeps its best, so a busy
moment on a shared machine counts against neither side of a ratio.
"""
import timeit


def race(ours, theirs, number, repeat):
    """Best per-call times (seconds) of two functions, timed in alternation."""
    timers = timeit.Timer(ours), timeit.Timer(theirs)
    best = [float("inf")] * 2
    for _ in range(repeat):
        best = [min(b, t.timeit(number)) for b, t in zip(best, timers)]
    return best[0] / number, best[1] / number
