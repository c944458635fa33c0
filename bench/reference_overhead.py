"""Per-call time of graph.reference() against the same computation written by hand in numpy.

Prints, for the seed chapter's Walk and one step of a 4-layer 256-wide residual MLP, both times
and their ratio (budgets: the Walk at most 10 us per call, the MLP at most 1.2x numpy). Measured
in one process, the two sides timed in alternation (bench/_timing.py).
"""
import numpy as np
from _timing import race

from iron.models.designs import MLP, Walk, numpy_mlp


def walk_ratio():
    successor = np.random.default_rng(0).permutation(64).astype(np.int32)
    walk = Walk(successor, 64)
    trail = np.zeros(64, np.int32)
    state = {"node": 0, "steps": 0}

    def iron_step():
        nxt = walk.reference(**state)
        state["node"], state["steps"] = nxt["node"], nxt["steps"] % 63

    def numpy_step():
        nxt = successor[state["node"]].copy()
        trail[state["steps"]] = nxt
        state["node"], state["steps"] = int(nxt), (state["steps"] + 1) % 63

    return race(iron_step, numpy_step, 500, 200)


def mlp_ratio():
    mlp = MLP(256, 4)
    x = np.random.default_rng(1).standard_normal(256).astype(np.float32)
    np.testing.assert_allclose(mlp.reference(x), numpy_mlp(mlp, x), rtol=1e-4, atol=1e-4)
    return race(lambda: mlp.reference(x), lambda: numpy_mlp(mlp, x), 20, 100)


def main():
    for name, (ours, theirs), budget in (("Walk", walk_ratio(), "<= 10 us/call"), ("MLP 4x256", mlp_ratio(), "<= 1.2x")):
        print(f"reference() {name:10s}: {ours * 1e6:8.2f} us/call  numpy {theirs * 1e6:8.2f} us/call  "
              f"ratio {ours / theirs:5.2f}x (budget {budget})")


if __name__ == "__main__":
    main()
