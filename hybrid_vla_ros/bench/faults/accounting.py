"""The kill accounting of `bench --scenario faults` (bench/faults/kills.py): what became of every frame.

Each published frame is delivered (a trajectory), reported lost by a node with a reason
(~/debug/dropped_frames), or lost in the killed process: exactly the frames it held at the kill (taken, not
passed on, newer than the last it passed on) or that reached it while it was down (held_by_killed), or shed
by DDS before the prefix saw any of its images (shed_by_dds: from the prefix's own per-camera image counts;
no node could report those). Anything else is `frames_unaccounted`: a frame lost silently, however close to
the kill.
"""

from __future__ import annotations

import bisect

from ..drive import Ledger


def graph_up_at(ledger: Ledger) -> float:
    """Publish time of the first frame the graph delivered: frames before it were published while the graph
    was still coming up (nodes starting, matching, activating) and are left out of the accounting, as the
    soak leaves out its probe frames. (Counting from the first frame the prefix handled instead, a CI run
    once found 50 frames of the first segment neither delivered nor reported: start-up, not recovery.)"""
    return min((ledger.published[s] for s in ledger.delivered if s in ledger.published), default=float("inf"))


# A message sent just before a kill (a frame info, a drop report) may reach the bench this much later, or die
# in the killed process's DDS send queue if sent within it: 0.2 s was too short once on a loaded 2-core CI run
INFO_TRANSIT_S = 0.5


def held_by_killed(ledger: Ledger, kill: dict, stamp: int, t_pub: float, back: float) -> bool:
    """Exactly the frames the killed node held, or whose fate it decided too late for its report to get out
    (within INFO_TRANSIT_S before the kill), or that went to it while it was down (until `back`, its first
    trajectory after the kill). Nodes take frames in stamp order, so a frame older than the last one the node
    had passed on INFO_TRANSIT_S before the kill was not in it then: lost earlier, silently (unaccounted).
      prefix: not handed on; newer than the last frame it handed by then; published before `back`.
      suffix: handed to it (frame info) before the kill (+ transit) and newer than the last frame delivered
              by then, or handed while it was down.
      scheduler: holds no frames."""
    t_kill, settled = kill["t_kill"], kill["t_kill"] - INFO_TRANSIT_S
    if kill["node"] == "hybrid_vla_prefix":
        last = max((s for s, t in ledger.handed.items() if t <= settled), default=-1)
        return stamp not in ledger.handed and stamp > last and t_pub <= back
    if kill["node"] == "hybrid_vla_suffix":
        handed = ledger.handed.get(stamp)
        last = max((s for s, t in ledger.delivered.items() if t <= settled), default=-1)
        return handed is not None and (stamp > last and handed <= t_kill + INFO_TRANSIT_S or t_kill < handed <= back)
    return False


def shed_by_dds(ledger: Ledger, silent: list[int]) -> set[int]:
    """Of `silent` (frames nothing became of that the prefix never handed on), those whose every camera image
    DDS shed before the prefix's callbacks took it: the cameras' sensor-data QoS is best effort, keep last 5
    at the reader, and a prefix executor five frames behind (2 loaded cores, the first frames' compute) loses
    the oldest. No node saw such a frame; none could report it.
    From the prefix's own counts (its diagnostics, ledger.prefix_cameras): between two reports of one prefix
    process its callback took count_b - count_a images of camera c, all stamped in (last_a, last_b] (one
    writer per topic: taken in publish order); the camera published one image per frame stamped there; the
    difference was shed. A frame counts as shed only when, for every camera, the window holding its stamp
    shed at least as many images as that window holds silent frames: a frame of which the prefix took an
    image (a set formed, or its discard reported) stays unaccounted."""
    stamps, silent = sorted(ledger.published), sorted(silent)
    runs: dict[int, list] = {}
    for pid, cameras in ledger.prefix_cameras:
        runs.setdefault(pid, []).append(cameras)
    verdicts: dict[int, dict[int, bool]] = {}   # stamp -> camera -> every window holding it shed enough
    for samples in runs.values():
        for a, b in zip(samples, samples[1:]):
            for c, ((taken_a, last_a), (taken_b, last_b)) in enumerate(zip(a, b)):
                if last_a < 0 or last_b <= last_a:   # no image yet, or none since (or time went back)
                    continue
                published = bisect.bisect_right(stamps, last_b) - bisect.bisect_right(stamps, last_a)
                shed = published - (taken_b - taken_a)
                inside = silent[bisect.bisect_right(silent, last_a):bisect.bisect_right(silent, last_b)]
                for stamp in inside:
                    seen = verdicts.setdefault(stamp, {})
                    seen[c] = seen.get(c, True) and shed >= len(inside)
    cameras = len(ledger.prefix_cameras[0][1]) if ledger.prefix_cameras else 0
    return {s for s, seen in verdicts.items() if len(seen) == cameras and all(seen.values())}


def covered_by_camera_reports(ledger: Ledger, stamp: int) -> bool:
    """Whether two consecutive camera-count reports of one prefix process bracket the stamp (last_a < stamp <=
    last_b on every camera): only then can shed_by_dds tell whether DDS shed the frame. A frame before a prefix
    process's first report (start-up, a respawn) is not covered: lost there, it stays unaccounted."""
    runs: dict[int, list] = {}
    for pid, cameras in ledger.prefix_cameras:
        runs.setdefault(pid, []).append(cameras)
    return any(all(last_a >= 0 and last_a < stamp <= last_b for (_, last_a), (_, last_b) in zip(a, b))
               for samples in runs.values() for a, b in zip(samples, samples[1:]))


def frame_fate(ledger: Ledger, kill: dict, stamp: int, t_pub: float, back: float) -> str | None:
    if stamp in ledger.delivered:
        return "delivered"
    if stamp in ledger.lost:
        return "dropped"
    return "held" if held_by_killed(ledger, kill, stamp, t_pub, back) else None


def account(ledger: Ledger, kills: list[dict], end: float) -> None:
    """Fill each kill's counts (see the module doc); the segment of a kill runs from the previous kill's
    recovery (the graph's start for the first) to the next kill."""
    latency = max([ledger.delivered[s] - t for s, t in ledger.published.items() if s in ledger.delivered], default=0)
    starts = [graph_up_at(ledger)] + [k["t_kill"] - latency for k in kills[1:]] + [end]
    segments = []
    for i, kill in enumerate(kills):
        lo, hi, back = starts[i], starts[i + 1], kill["t_back"] or end
        segments.append([(stamp, t_pub, frame_fate(ledger, kill, stamp, t_pub, back))
                         for stamp, t_pub in ledger.published.items() if lo <= t_pub < hi])
    # silent: nothing became of it and the prefix never handed it on (start-up frames outside every segment
    # too: they may have spent a window's shed images)
    counted = {stamp for frames in segments for stamp, _, fate in frames if fate is not None}
    silent = [s for s in ledger.published if s not in counted and s not in ledger.delivered
              and s not in ledger.lost and s not in ledger.handed]
    shed = shed_by_dds(ledger, silent)
    for kill, frames in zip(kills, segments):
        counts = {"published": 0, "delivered": 0, "dropped_counted": 0, "lost_in_killed_process": 0,
                  "frames_shed_by_dds": 0, "frames_unaccounted": 0}
        reasons: dict = {}
        unaccounted: list[float] = []
        handed: list[float | None] = []
        uncovered = 0   # unaccounted frames no pair of the prefix's camera reports brackets (where to look)
        for stamp, t_pub, fate in frames:
            counts["published"] += 1
            if fate == "delivered":
                counts["delivered"] += 1
            elif fate == "dropped":
                counts["dropped_counted"] += 1
                reasons[ledger.lost[stamp]] = reasons.get(ledger.lost[stamp], 0) + 1
            elif fate == "held":
                counts["lost_in_killed_process"] += 1
            elif stamp in shed:
                counts["frames_shed_by_dds"] += 1
            else:
                counts["frames_unaccounted"] += 1
                unaccounted.append(round(t_pub - kill["t_kill"], 3))
                handed.append(round(ledger.handed[stamp] - kill["t_kill"], 3) if stamp in ledger.handed else None)
                uncovered += not covered_by_camera_reports(ledger, stamp)
        kill.update(counts, dropped_reasons=reasons, max_latency_s=round(latency, 3),
                    unaccounted_published_s=unaccounted[:50],  # relative to the kill: where to look
                    unaccounted_handed_s=handed[:50],          # ... and when the prefix handed each on (None: never)
                    unaccounted_outside_camera_reports=uncovered,
                    t_back_s=round(kill["t_back"] - kill["t_kill"], 3) if kill["t_back"] else None,
                    partitions_after=sorted({p for t, p in ledger.partitions if t > kill["t_kill"]}))
