"""Lanes (iron/runtime/emulator/lanes.py): which acts of a replayed launch wait for which lane's
thread, and the threads themselves. That designs on lanes give what each call on its own does
is tests/runtime/test_batched_replay.py's (`lanes` fixture)."""
import threading

import pytest

from iron.runtime.emulator.acts import Copy
from iron.runtime.emulator.batch import Batch
from iron.runtime.emulator.lanes import Join, Laned, LaneThread, lane_thread, laned, settle
from iron.runtime.emulator.tile import Buffer
from tests.runtime.test_batched_replay import invoked


def plan(trace: list) -> list:
    """The laned trace as (kind, the lanes a Join waits for or the act)."""
    return [("join", act.lanes) if type(act) is Join else ("hand", act.batch) if type(act) is Laned else ("run", act)
            for act in laned([trace], [])[0]]


def test_an_act_waits_for_a_lane_only_when_it_conflicts_with_what_that_lane_was_handed():
    a, b, c, d, e = (Buffer(name, 256) for name in "abcde")
    mine = Batch((invoked(a, b, "tile_0_2"), invoked(a, c, "tile_0_3")), (False,), lane=1)   # reads a, writes b, c
    apart = invoked(d, e, "tile_0_4")   # shares no bytes with it: runs while lane 1 works
    reads_b = Copy(d, 0, b, 0, 4)        # reads b, which lane 1 writes
    assert plan([mine, apart, reads_b]) == [("hand", mine), ("run", apart), ("join", (1,)), ("run", reads_b)]
    # also reading a, as the lane does, is no conflict; the launch ends with its lanes joined
    reads_a = Copy(d, 0, a, 0, 4)
    assert plan([mine, reads_a]) == [("hand", mine), ("run", reads_a), ("join", (1,))]
    # an act on another lane that writes what lane 1 reads waits for lane 1; lane 0's Batch
    # runs on the launch's thread
    writes_a = Batch((invoked(d, a, "tile_0_5"), invoked(e, a, "tile_0_5")), (False,), lane=2)
    here = Batch((invoked(d, e, "tile_0_6"), invoked(d, e, "tile_0_7")), (False,), lane=0)
    assert plan([mine, writes_a, here]) == [("hand", mine), ("join", (1,)), ("hand", writes_a), ("join", (2,)),
                                            ("run", here)]
    # acts of one lane run in order on its thread: no Join between them
    again = Batch((invoked(b, c, "tile_0_2"), invoked(b, c, "tile_0_3")), (False,), lane=1)
    assert plan([mine, again]) == [("hand", mine), ("hand", again), ("join", (1,))]
    assert plan([apart]) == [("run", apart)]   # nothing handed: nothing joined


def test_a_lane_thread_runs_what_it_is_handed_in_order_and_join_raises_its_error():
    thread, ran = LaneThread(), []
    for k in range(5):
        thread.hand(lambda k=k: ran.append(k))()
    thread.join()
    assert ran == [0, 1, 2, 3, 4]

    def fails():
        raise ValueError("the kernel's error")
    thread.hand(fails)()
    thread.hand(lambda: ran.append(5))()
    with pytest.raises(ValueError, match="the kernel's error"):
        thread.join()
    assert ran == [0, 1, 2, 3, 4, 5]
    thread.join()   # the error is raised once


def test_settling_after_a_failed_launch_leaves_no_lane_error_for_the_next():
    def fails():
        raise ValueError("a lane's error")
    lane_thread(1).hand(fails)()
    settle()
    lane_thread(1).join()


def test_joining_runs_on_the_joining_thread_what_the_lane_thread_has_not_started(monkeypatch):
    """On a busy machine the lane's thread may not have had a CPU yet: join does not wait for it."""
    monkeypatch.setattr(threading.Thread, "start", lambda self: None)   # a thread that never runs
    thread, ran = LaneThread(), []
    for k in range(3):
        thread.hand(lambda k=k: ran.append((k, threading.get_ident())))()
    thread.join()
    assert ran == [(k, threading.get_ident()) for k in range(3)]
