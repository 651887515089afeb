"""The warm standby's buffer (ros/nodes/standby.py, engine/pipeline/standby_buffer.py): sized in frames x chunks
and the takeover time, never silently short. Found in review: `deque(maxlen=16)` counted messages, so at
`chunks: 8` and 20 Hz the 0.3 s takeover window alone (48 messages) pushed out frames nobody counted."""

from types import SimpleNamespace

from hybrid_vla_ros.engine.pipeline.worker import StageHealth
from hybrid_vla_ros.ros.nodes.standby import SuffixRole

PERIOD_S = 0.05   # 20 Hz


class FakeNode:
    """What a SuffixRole uses of its suffix node; the ROS entities are recorded, never created."""

    def __init__(self):
        self.last_stamp_ns, self.msg_cls, self.published = -1, object, []
        self.lost: list[tuple[str, str, int]] = []
        self.health = StageHealth(listener=lambda kind, reason, stamp: self.lost.append((kind, reason, stamp)))

    def configured_publisher(self, *args):
        return SimpleNamespace(publish=self.published.append)

    def configured_subscription(self, *args):
        pass

    def configured_timer(self, *args):
        pass

    def count_publishers(self, topic):
        return 2

    def get_name(self):
        return "hybrid_vla_suffix_standby"

    def get_logger(self):
        return SimpleNamespace(warning=lambda *a, **k: None, info=lambda *a, **k: None)


def stamp(frame: int) -> int:
    return (frame + 1) * 50_000_000


def trajectory(frame: int):
    """The ~/debug/trajectory_info of a published frame (what a SuffixRole follows: the camera stamp)."""
    return SimpleNamespace(values=[SimpleNamespace(key="seq", value=str(frame)),
                                   SimpleNamespace(key="stamp_ns", value=str(stamp(frame)))])


def arrive(role, frames, chunks: int, t0: float = 0.0, period_s: float = PERIOD_S) -> list:
    """Every chunk of each frame at the standby, frame by frame at period_s (received: perf_counter-like)."""
    items = []
    for i, frame in enumerate(frames):
        for c in range(chunks):
            item = (f"frame {frame} chunk {c}".encode(), t0 + i * period_s + c * 0.001)
            role.keep(item, stamp(frame))
            items.append(item)
    return items


def test_a_standby_hands_over_every_chunk_the_active_one_left_at_8_chunks_and_20_hz():
    """Frames 0..9 reach both suffixes; the active one has published up to frame 7 (8 and 9 in flight) when it
    dies; frames 10..16 (0.35 s at 20 Hz: the takeover window) reach the standby only. The standby runs all
    72 chunks of frames 8..16, oldest first, and counts no loss; frames already published left its buffer."""
    node, promoted = FakeNode(), []
    role = SuffixRole(node, True, promoted.extend, frames_in_flight=64, chunks=8)
    before = arrive(role, range(10), 8)
    for frame in range(8):
        role._on_published(trajectory(frame))
    assert role.check()[3]["buffered"] == "16"       # only the two frames the active one has not published
    during = arrive(role, range(10, 17), 8, t0=10 * PERIOD_S)
    role._promote()
    assert promoted == before[8 * 8:] + during
    assert node.lost == [] and role.active


def test_frames_pushed_out_of_a_full_standby_are_counted_once_at_the_takeover_unless_published():
    """Bound: chunks x (frames in flight + the frames of the takeover window, at most as many again). Six
    frames of 2 chunks, a second apart (one in the window), with room for 2 + 1 frames: frames 0, 1 and 2 are
    pushed out. The active one publishes frame 0 (it served it: no loss), then dies: frames 1 and 2 are lost,
    each counted once as dropped (standby_full) with its stamp; a late chunk of frame 2 is not kept."""
    node, promoted = FakeNode(), []
    role = SuffixRole(node, True, promoted.extend, frames_in_flight=2, chunks=2)
    items = arrive(role, range(6), 2, period_s=1.0)
    role.keep((b"frame 2 late chunk", 5.5), stamp(2))
    role._on_published(trajectory(0))
    values = role.check()[3]
    assert values["buffered"] == "6" and values["pushed_out"] == "3"
    role._promote()
    assert node.lost == [("dropped", "standby_full", stamp(1)), ("dropped", "standby_full", stamp(2))]
    assert node.health.drop_reasons["standby_full"] == 2
    assert promoted == items[3 * 2:]
    assert role.check()[3]["pushed_out_lost"] == "2"


def test_a_primary_that_stood_by_at_start_up_runs_the_newest_frames_its_queue_takes_and_counts_the_oldest():
    """Found by a loaded run of the warm-standby kill test: a primary suffix that sees the standby at start-up
    stands by for FIRST_WAIT_S (5 s), keeping what reaches it: 64 frames in flight plus those of the 0.4 s
    takeover window (8 or 9 at 20 Hz). At its promotion they went into a worker queue of 64, which refused the
    newest (the only ones young enough to publish) and kept the stalest, refused later as too old; and those
    refusals reached no reader in that burst of reports (7 frames unaccounted). Now the oldest that do not fit
    are counted and the newest run."""
    from hybrid_vla_ros.engine.pipeline.standby_buffer import hand_to_worker
    from hybrid_vla_ros.engine.pipeline.worker import StageWorker
    node, promoted = FakeNode(), []
    node.get_name = lambda: "hybrid_vla_suffix"
    role = SuffixRole(node, False, promoted.extend, frames_in_flight=64, chunks=1)
    frames = range(100)                               # 5 s at 20 Hz
    items = arrive(role, frames, 1, t0=0.0)
    role._promote()
    n = len(promoted)
    assert n > 64 and promoted == items[-n:]
    worker = StageWorker("suffix", lambda item: None, capacity=64, health=node.health,
                         stamp_of=lambda item: stamp(int(item[0].split()[1])))   # not started: nothing taken
    hand_to_worker(promoted, worker, worker.stamp_of)
    assert worker.backlog() == 64
    assert [worker._mailbox.take() for _ in range(64)] == items[-64:]            # the newest 64, oldest first
    assert node.lost == [("dropped", "standby_full", stamp(f)) for f in range(100 - n)] + \
        [("dropped", "queue_full", stamp(f)) for f in range(100 - n, 36)]   # every frame run or counted, once


def test_a_cut_through_a_chunked_frame_leaves_the_whole_frame_out():
    from hybrid_vla_ros.engine.pipeline.standby_buffer import newest_that_fit
    items = [(f, c) for f in range(4) for c in range(3)]          # 4 frames of 3 chunks
    kept, out = newest_that_fit(items, 7, lambda item: item[0])     # 7 would split frame 1
    assert kept == items[6:] and out == [0, 1]
    assert newest_that_fit(items, 12, lambda item: item[0]) == (items, [])
    assert newest_that_fit(items, 0, lambda item: item[0]) == ([], [0, 1, 2, 3])
