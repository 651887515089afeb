"""Time limits that hold at every size (engine/pipeline/limits.py, issue 25): auto values derive from the
measured times with a floor, explicit values are kept and warned about when below the measured time, and
each consumer (token timeout, in-flight slots, the stamped-state history, stuck detection, the bench
pipeline's submit, the suffix's output age) follows what it measured."""

import time

import pytest

from hybrid_vla_ros.engine.pipeline.limits import AUTO, OUTPUT_AGE, Recent, resolve, wait_s
from hybrid_vla_ros.errors import ConfigError

MS = 1_000_000


def test_auto_is_factor_times_the_longest_recent_time_never_below_the_floor():
    factor, floor_s = OUTPUT_AGE
    assert resolve("x", AUTO, "ms", 0.05, factor, floor_s, "stale_output").seconds == 0.5     # small model: floor
    limit = resolve("x", AUTO, "ms", 2.4, factor, floor_s, "stale_output")                   # real size
    assert limit.seconds == pytest.approx(12.0) and limit.source.startswith("auto") and not limit.warning
    assert resolve("x", AUTO, "s", 0.0, 5, 2.0, "t", unmeasured_s=60.0).seconds == 60.0      # nothing measured
    assert resolve("x", 0.0, "ms", 2.4, factor, floor_s, "stale_output", never_at_zero=True).seconds is None
    recent = Recent(size=3)
    for seconds in (1.0, 4.0, 2.0, 3.0, 0.0):   # the oldest falls out; 0 (nothing measured) is no sample
        recent.add(seconds)
    assert recent.longest() == 4.0 and len(recent) == 3
    recent.add(1.0)
    assert recent.longest() == 3.0


def test_an_explicit_value_is_kept_and_below_the_measured_time_says_why_every_frame_will_be_lost():
    limit = resolve("max_output_age_ms", 500.0, "ms", 2.4, *OUTPUT_AGE, loss="stale_output")
    assert limit.seconds == 0.5 and limit.source == "set"
    assert "below the measured 2400 ms" in limit.warning and "stale_output" in limit.warning
    assert "-1 (auto" in limit.warning
    assert not resolve("max_output_age_ms", 5000.0, "ms", 2.4, *OUTPUT_AGE, loss="stale_output").warning


def test_a_conversation_frames_age_limit_counts_its_whole_latency_not_the_suffixs_share():
    """The output age limit scales with a frame's own time: for a frame served as a conversation (Alpamayo's
    decode and expert steps, action tokens) that is its latency since arrival, the prefix's prefill and every
    exchange in it, not the few ms of suffix compute (review of the one output path: a release cut high would
    otherwise lose its first frames as stale_output); a chunked frame's from its first chunk; else the suffix's."""
    from hybrid_vla_ros.ros.chunk_flow import frame_compute_ms
    assert frame_compute_ms({"suffix_ms": "5.0", "latency_ms": "900.0", "queue_ms": "1.0"}) == 900.0
    assert frame_compute_ms({"latency_ms": "420.0"}) == 420.0
    assert frame_compute_ms({"frame_ms": "300.0", "queue_ms": "20.0", "suffix_ms": "90.0"}) == 280.0
    assert frame_compute_ms({"suffix_ms": "90.0", "queue_ms": "3.0"}) == 90.0


def test_waits_are_half_a_measured_period_at_least_a_tenth_of_a_second():
    assert wait_s(0.0) == 0.1 and wait_s(0.05) == 0.1 and wait_s(3.0) == 1.5


def test_the_parameters_take_auto_and_refuse_what_lies_between_auto_and_the_minimum():
    from hybrid_vla_ros.ros.params import PREFIX_PARAMS, SUFFIX_PARAMS
    age = next(p for p in SUFFIX_PARAMS if p.name == "max_output_age_ms")
    token = next(p for p in PREFIX_PARAMS if p.name == "token_timeout_s")
    assert age.check(AUTO) == AUTO and age.check(0.0) == 0.0 and token.check(AUTO) == AUTO
    for spec, value in ((age, -0.5), (token, 0.0), (token, -2.0)):
        with pytest.raises(ConfigError, match="below the minimum"):
            spec.check(value)


def test_an_in_flight_slot_of_a_slow_suffix_is_not_taken_for_a_lost_one():
    from hybrid_vla_ros.engine.pipeline.flight import SLOT_TIMEOUT_FLOOR_S, FlightControl
    flight = FlightControl(2, just_in_time=False, slot_timeout_s="auto")
    assert flight.slot_timeout() == SLOT_TIMEOUT_FLOOR_S               # nothing measured: the floor
    flight.prefix_finished(0.5)
    flight.suffix_started()
    flight.suffix_finished(4.0)                                         # a 7B CPU suffix
    assert flight.slot_timeout() == pytest.approx(5 * (0.5 + 2 * 4.0))
    flight.suffix_started()
    flight._suffix_started -= 30.0                                      # a first frame running for 30 s
    assert flight.slot_timeout() > 5 * 2 * 30.0
    assert FlightControl(1, slot_timeout_s=3.0).slot_timeout() == 3.0  # explicit: as set
    with pytest.raises(ConfigError, match="slot_timeout_s"):
        FlightControl(1, slot_timeout_s="soon")


def test_the_stamped_history_keeps_states_as_far_back_as_matches_reach():
    """A real-size frame's pose is asked for seconds after its stamp: the history keeps by stamp time (at
    least 10 s, twice what matches reached), not a count of 200 (2 s of a 100 Hz odometry)."""
    from hybrid_vla_ros.engine.pipeline.camera_sync import KEEP_FLOOR_S, StampedHistory
    history = StampedHistory()
    for i in range(1500):                                               # 15 s at 100 Hz
        history.add(i * 10 * MS, i)
    assert history.keep_s() == KEEP_FLOOR_S and len(history.entries) == 1001   # the newest 10 s
    assert history.match(5_990 * MS, 5 * MS) == (599, True)             # 9 s behind the newest: kept
    assert history.keep_s() == pytest.approx(18.0)                      # ... twice that is kept from now on
    assert history.match(2_990 * MS, 5 * MS)[1] is False                # 12 s: gone before it was asked for
    for i in range(1500, 4000):
        history.add(i * 10 * MS, i)
    assert history.match(16_000 * MS, 5 * MS) == (1600, True)           # 24 s behind the newest now
    history.add(39_000 * MS - int(2.5e9), "new timeline")              # time went back (a bag loop)
    assert list(history.entries) == [(39_000 * MS - int(2.5e9), "new timeline")]


def test_a_frame_running_for_seconds_is_stuck_only_past_five_of_the_recent_frames():
    from hybrid_vla_ros.engine.pipeline.worker import StageHealth, StageWorker
    health = StageHealth()
    worker = StageWorker("suffix", lambda item: None, health=health, stuck_after_s=30.0)
    assert worker.stuck_after() == 30.0
    health.record(9_000.0)                                               # 9 s frames
    assert worker.stuck_after() == pytest.approx(45.0)


def test_the_bench_pipeline_waits_for_room_as_long_as_its_measured_stages_need():
    from hybrid_vla_ros.engine.pipeline.cross_frame import SUBMIT_TIMEOUT_FLOOR_S, Pipeline, PipelineConfig
    from hybrid_vla_ros.engine.stages import PrefixStage, SuffixStage
    from hybrid_vla_ros.model.load import load_vla
    model = load_vla(preset="tiny")
    pipe = Pipeline(PrefixStage(model, 2), SuffixStage(model, 2), PipelineConfig()).start()
    try:
        assert pipe.submit_timeout() == SUBMIT_TIMEOUT_FLOOR_S
        pipe.flight.suffix_finished(8.0)
        assert pipe.submit_timeout() == pytest.approx(10 * 2 * 8.0)
        pipe.config.submit_timeout_s = 5.0
        assert pipe.submit_timeout() == 5.0
    finally:
        pipe.close()


def test_auto_token_timeout_follows_the_measured_round_trips():
    from hybrid_vla_ros.engine.actionflow.prefix_server import PackedPrefixServer
    from hybrid_vla_ros.engine.actionflow.suffix_server import PackedSuffixServer
    from hybrid_vla_ros.engine.pipeline.limits import TOKEN_FIRST_S
    from hybrid_vla_ros.model.inputs import synthetic_frame
    from hybrid_vla_ros.model.load import load_vla
    model = load_vla(preset="tiny-act")
    prefix = PackedPrefixServer(model, 1, 1, 2, policy="lossless", capacity=4, token_timeout_s=AUTO)
    suffix = PackedSuffixServer(model)
    assert prefix.timeout().seconds == TOKEN_FIRST_S                    # before any answer: a first prefill
    prefix.submit(synthetic_frame(model.spec, 0, stamp_ns=100 * MS))
    sent = prefix.step(prefix.next_group(wait_s=0.0))
    out = suffix.step(sent.payload)
    time.sleep(0.6)                                                     # a slow suffix: 0.6 s per step
    prefix.tokens_in(out.tokens_payload)
    prefix.next_group(wait_s=0.0)
    limit = prefix.timeout()
    assert limit.source.startswith("auto") and limit.seconds == pytest.approx(5 * prefix.round_trips.longest())
    assert prefix.round_trips.longest() >= 0.6 and limit.seconds >= 3.0
    prefix.token_timeout_s = 0.2                                        # explicit, below the measured round trip
    assert prefix.timeout().seconds == 0.2 and "token_feedback_timeout" in prefix.timeout().warning
    prefix.close()


def test_an_explicit_output_age_below_the_frame_time_is_kept_and_said_in_diagnostics_and_the_log(domain, capfd):
    """Set below one frame's time, max_output_age_ms drops every frame: the node says so (WARN, with the
    measured time and what to set), never silently."""
    from ros_harness import Harness, wait_until
    h = Harness({"hybrid_vla_suffix": {"max_output_age_ms": 0.001}})
    try:
        h.send_frame(0, wait=False)
        assert wait_until(lambda: h.suffix.health.rejected["stale_output"] == 1, h.spin)
        check, level, message, values = h.suffix.limits.check()
        assert (check, level, values["max_output_age_source"]) == ("time_limits", 1, "set")
        assert "below the measured" in message and "stale_output" in message
        prefix = dict(h.prefix.limits.check()[3])
        assert prefix["flight_slot_timeout_ms"] == "10000" and prefix["kinematic_wait_ms"] == "100"
    finally:
        h.close()
    assert "max_output_age_ms 0.001 ms is below the measured" in capfd.readouterr().err


class StubSuffix:
    """What SuffixTimeLimits asks of its node."""

    def __init__(self, setting):
        from hybrid_vla_ros.engine.pipeline.worker import StageHealth
        self.params, self.health, self.rejected, self.warned = {"max_output_age_ms": setting}, StageHealth(), [], []

    def get_logger(self):
        return self

    def warning(self, text, **_):
        self.warned.append(text)

    def _reject(self, reason, exc, stamp_ns=None):
        self.rejected.append((reason, stamp_ns, str(exc)))


def ago(seconds: float) -> int:
    return time.time_ns() - int(seconds * 1e9)


def test_auto_output_age_holds_for_a_slow_suffix_and_refuses_old_states_replayed_to_a_fresh_one():
    from hybrid_vla_ros.ros.nodes.time_limits import SuffixTimeLimits
    slow = SuffixTimeLimits(StubSuffix(AUTO))
    assert slow.fresh(0, 1, ago(0.1))                                   # nothing measured: judged at publish
    assert slow.fresh(0, 1, ago(2.3), compute_s=2.2, final=True)        # a 2.2 s frame, 2.3 s old: fresh
    assert slow.fresh(1, 2, ago(6.9), queue_s=2.2, compute_s=2.2, final=True)   # two behind it: still fresh
    assert slow.output_age().seconds == pytest.approx(5 * 4.7, rel=0.05) and not slow.node.rejected
    restarted = SuffixTimeLimits(StubSuffix(AUTO))   # the boundary topic's history, seconds old, at a new suffix
    restarted.started_ns = ago(0.2)
    assert not restarted.fresh(0, 0, ago(6.0))                          # refused before any compute
    assert "before this suffix was active" in restarted.node.rejected[0][2]
    assert restarted.fresh(1, 1, ago(0.5))                              # a live one (in flight at the start)
    for seq in range(2, 4):                                            # judged at publish: its compute is known
        assert not restarted.fresh(seq, seq, ago(6.0), compute_s=0.05, final=True)
    assert [r[0] for r in restarted.node.rejected] == ["stale_output"] * 3 and not len(restarted.frames)
    packed = SuffixTimeLimits(StubSuffix(AUTO))      # an action-token frame: prefill to last token, 1.2 s
    assert packed.fresh(5, 6, ago(1.3), compute_s=1.2, final=True)
    never = SuffixTimeLimits(StubSuffix(0.0))
    assert never.fresh(0, 1, ago(3600.0), final=True) and never.output_age().seconds is None
