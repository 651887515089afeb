"""The cross-frame pipeline: order, drops, back-pressure, errors, shutdown, zero-copy, pinning."""

import threading
import time

import numpy as np
import pytest

from hybrid_vla_ros.engine.cpu import allowed_cores, thread_affinity
from hybrid_vla_ros.engine.pipeline.cross_frame import Pipeline, PipelineConfig
from hybrid_vla_ros.engine.stages import PrefixStage, SuffixStage
from hybrid_vla_ros.errors import ConfigError
from hybrid_vla_ros.model.inputs import synthetic_frame
from hybrid_vla_ros.model.load import load_vla


@pytest.fixture(scope="module")
def model():
    return load_vla(preset="tiny")


def frames(model, n, start=0):
    return [synthetic_frame(model.spec, seq) for seq in range(start, start + n)]


def run_all(model, partition, config, inputs):
    pipe = Pipeline(PrefixStage(model, partition), SuffixStage(model, partition), config).start()
    for frame in inputs:
        pipe.submit(frame)
    return pipe, pipe.finish()


class SlowSuffix(SuffixStage):
    """The real suffix plus a delay (a timing double: it makes the suffix the bottleneck on purpose)."""
    delay_s = 0.03

    def run(self, state):
        time.sleep(self.delay_s)
        return super().run(state)


@pytest.mark.parametrize("transport", ["inproc", "shm", "inline"])
def test_pipelined_output_equals_serial_output_frame_by_frame_in_order(model, transport):
    inputs = frames(model, 6)
    _, serial = run_all(model, 2, PipelineConfig(max_in_flight=1), inputs)
    _, piped = run_all(model, 2, PipelineConfig(max_in_flight=2, transport=transport), inputs)
    assert [r.seq for r in piped] == [r.seq for r in serial] == list(range(6))
    # bit-equal: both pipelines run each stage on a worker with the same torch thread count (no cores or threads
    # given: one per core this process may use, engine/cpu.py pin_current_thread) on the same whole-frame shapes,
    # and every transport hands the boundary bytes over unchanged: the same kernels on the same inputs
    for a, b in zip(serial, piped):
        assert a.ok and b.ok, (a.error, b.error)
        np.testing.assert_array_equal(a.trajectory.points, b.trajectory.points)
        assert b.trajectory.partition == 2


def test_latest_policy_delivers_or_counts_every_frame(model):
    pipe = Pipeline(PrefixStage(model, 2), SlowSuffix(model, 2), PipelineConfig(policy="latest")).start()
    for frame in frames(model, 20):
        pipe.submit(frame)
    results = pipe.finish()
    delivered = [r.seq for r in results]
    assert pipe.stats.dropped, "a burst into a slow pipeline must drop under latest-frame-wins"
    assert sorted(delivered + pipe.stats.dropped) == list(range(20))
    assert delivered == sorted(delivered)
    assert 19 in delivered  # the newest frame always wins


def test_lossless_policy_never_drops(model):
    pipe = Pipeline(PrefixStage(model, 1), SlowSuffix(model, 1), PipelineConfig(policy="lossless")).start()
    for frame in frames(model, 8):
        assert pipe.submit(frame)
    results = pipe.finish()
    assert [r.seq for r in results] == list(range(8)) and not pipe.stats.dropped


@pytest.mark.parametrize("limit", [1, 2, 3])
def test_back_pressure_bounds_frames_in_flight(model, limit):
    transport_sizes = []

    class Watching(SlowSuffix):
        def run(self, state):
            transport_sizes.append(pipe.handover_pending())
            return super().run(state)

    pipe = Pipeline(PrefixStage(model, 2), Watching(model, 2), PipelineConfig(max_in_flight=limit)).start()
    for frame in frames(model, 10):
        pipe.submit(frame)
    pipe.finish()
    assert pipe.stats.max_in_flight_seen == limit
    assert max(transport_sizes) <= limit - 1  # boundary states alive besides the one being consumed


def test_a_frame_that_fails_is_reported_and_the_next_goes_on(model):
    inputs = frames(model, 5)
    inputs[2].images[0] = np.zeros((10, 10, 4), np.uint8)
    _, results = run_all(model, 2, PipelineConfig(), inputs)
    assert [r.seq for r in results] == list(range(5))
    assert results[2].failed_stage == "prefix" and "image shape (10, 10, 4)" in results[2].error
    assert all(r.ok for i, r in enumerate(results) if i != 2)


def test_a_suffix_error_is_reported_in_order(model):
    class FailsOnThree(SuffixStage):
        def run(self, state):
            if state.seq == 3:
                raise RuntimeError("boom on 3")
            return super().run(state)

    pipe = Pipeline(PrefixStage(model, 2), FailsOnThree(model, 2)).start()
    for frame in frames(model, 5):
        pipe.submit(frame)
    results = pipe.finish()
    assert [(r.seq, r.failed_stage) for r in results] == [(0, None), (1, None), (2, None), (3, "suffix"), (4, None)]
    assert "boom on 3" in results[3].error


def test_shutdown_never_hangs_on_a_stuck_stage(model):
    release = threading.Event()

    class Stuck(SuffixStage):
        def run(self, state):
            release.wait(30)
            return super().run(state)

    pipe = Pipeline(PrefixStage(model, 2), Stuck(model, 2), PipelineConfig(join_timeout_s=0.5)).start()
    pipe.submit(synthetic_frame(model.spec, 0))
    time.sleep(0.2)
    start = time.monotonic()
    pipe.close()
    assert time.monotonic() - start < 3.0
    release.set()


def test_finish_waits_as_long_as_frames_keep_finishing_and_gives_up_on_a_stall(model):
    """A slow pipeline is not cut off by a total time limit (a real-size frame takes a minute: a fixed 120 s
    once ended a 5-frame run after 2); a stalled one is given up after the stall limit."""
    class Slower(SlowSuffix):
        delay_s = 0.25

    pipe = Pipeline(PrefixStage(model, 2), Slower(model, 2), PipelineConfig(max_in_flight=2)).start()
    for frame in frames(model, 6):
        pipe.submit(frame)
    start = time.monotonic()
    results = pipe.finish(timeout_s=0.6)                   # 6 x 0.25 s in all, never 0.6 s without a frame
    assert [r.seq for r in results] == list(range(6)) and time.monotonic() - start > 0.6
    release = threading.Event()

    class Stuck(SuffixStage):
        def run(self, state):
            release.wait(30)
            return super().run(state)

    pipe = Pipeline(PrefixStage(model, 2), Stuck(model, 2), PipelineConfig(join_timeout_s=0.2)).start()
    pipe.submit(synthetic_frame(model.spec, 0))
    start = time.monotonic()
    assert pipe.finish(timeout_s=0.5) == [] and time.monotonic() - start < 3.0
    release.set()


def test_in_process_handover_passes_the_very_tensor(model):
    produced, received = [], []

    class RecordingPrefix(PrefixStage):
        def run(self, frame):
            state = super().run(frame)
            produced.append(state.hidden)
            return state

    class RecordingSuffix(SuffixStage):
        def run(self, state):
            received.append(state.hidden)
            return super().run(state)

    pipe = Pipeline(RecordingPrefix(model, 2), RecordingSuffix(model, 2)).start()
    for frame in frames(model, 3):
        pipe.submit(frame)
    pipe.finish()
    assert len(produced) == len(received) == 3
    for a, b in zip(produced, received):
        assert a is b and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def test_stages_run_on_disjoint_pinned_cores(model):
    """Each stage's thread runs on exactly the cores it was given. (A one-core machine cannot give the stages
    disjoint sets: there the split is refused with a reason instead.)"""
    from hybrid_vla_ros.engine.cpu import split_cores
    cores = allowed_cores()
    if len(cores) < 2:
        with pytest.raises(ConfigError, match="cannot give 2 stages disjoint cores"):
            split_cores(cores, 2)
        return
    seen = {}

    class P(PrefixStage):
        def run(self, frame):
            seen["prefix"] = thread_affinity()
            return super().run(frame)

    class S(SuffixStage):
        def run(self, state):
            seen["suffix"] = thread_affinity()
            return super().run(state)

    prefix_cores, suffix_cores = split_cores(cores, 2)
    pipe = Pipeline(P(model, 2), S(model, 2), PipelineConfig(prefix_cores=prefix_cores, suffix_cores=suffix_cores)).start()
    pipe.submit(synthetic_frame(model.spec, 0))
    pipe.finish()
    assert seen == {"prefix": prefix_cores, "suffix": suffix_cores}


def test_overlapping_core_sets_and_bad_limits_are_refused():
    with pytest.raises(ConfigError, match=r"overlap on cores \[1\]"):
        PipelineConfig(prefix_cores=[0, 1], suffix_cores=[1])
    with pytest.raises(ConfigError, match="max_in_flight=0"):
        PipelineConfig(max_in_flight=0)
    with pytest.raises(ConfigError, match="policy 'newest'"):
        PipelineConfig(policy="newest")


def test_partition_change_mid_stream_matches_unsplit_for_every_frame(model):
    from hybrid_vla_ros.engine.stages import reference_forward
    zone = (1, 3)
    pipe = Pipeline(PrefixStage(model, 1, zone=zone), SuffixStage(model, 1, zone=zone)).start()
    inputs = frames(model, 6)
    for i, frame in enumerate(inputs):
        if i == 3:
            pipe.set_partition(3)  # lands at a frame boundary of the prefix
        pipe.submit(frame)
    results = pipe.finish()
    assert [r.seq for r in results] == list(range(6))
    assert {r.partition for r in results} <= {1, 3} and results[-1].partition == 3
    for frame, result in zip(inputs, results):
        _, ref = reference_forward(model, frame)
        assert result.trajectory.partition == result.partition
        np.testing.assert_allclose(result.trajectory.points, ref.points, atol=1e-6)


def test_a_late_release_after_a_reclaim_does_not_free_the_slot_of_a_frame_in_flight():
    """A slot nobody released is reclaimed after slot_timeout_s; when its release then arrives after all, it
    used to pop the slot of a frame still in flight, letting one more frame in than max_in_flight."""
    from hybrid_vla_ros.engine.pipeline.flight import FlightControl
    flight = FlightControl(2, just_in_time=False, slot_timeout_s=0.05)
    assert flight.admit() and flight.admit()          # frames a and b
    time.sleep(0.1)
    assert flight.admit()                             # c: a's slot is reclaimed
    assert flight.reclaimed == 1 and flight.in_flight == 2
    flight.release()                                  # a's release, late
    assert flight.in_flight == 2                      # b and c are still in flight
    flight.release()
    flight.release()
    assert flight.in_flight == 0


def test_a_just_in_time_start_ends_when_the_suffix_frees_up_not_at_an_estimate_made_before():
    """Issue 50: the prefix's just-in-time wait was fixed at admit from the suffix's time per frame as measured
    so far; a first frame measured slow (a loaded machine, 3 s) held the next frame's start ~3 s however soon
    the suffix was free, its camera stamp ageing in the mailbox (retime_too_old). The wait follows the suffix:
    it ends once everything handed to the suffix is done."""
    import threading
    from hybrid_vla_ros.engine.pipeline.flight import FlightControl
    flight = FlightControl(2, just_in_time=True)
    assert flight.admit()                        # frame 0
    flight.prefix_finished(0.01)                 # handed in process
    flight.suffix_started()
    flight.suffix_finished(3.0)                  # measured slow: suffix_s = 3 s
    assert flight.admit()                        # frame 1: the suffix is idle, no wait
    flight.prefix_finished(0.01)
    flight.suffix_started()                      # frame 1 running, estimated 3 s
    done = threading.Timer(0.2, flight.suffix_finished, args=(0.2,))   # ... it takes 0.2 s
    done.start()
    start = time.monotonic()
    assert flight.admit()                        # frame 2: waits just in time for frame 1's end
    waited = time.monotonic() - start
    done.join()
    assert 0.1 < waited < 1.0, f"waited {waited:.2f} s for a suffix that was free after 0.2 s"
    assert flight.last_waits_s[1] == pytest.approx(waited, abs=0.05)
