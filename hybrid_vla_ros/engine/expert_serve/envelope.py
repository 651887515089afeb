"""The frame envelope around a crossing (wire.py) when the two sides of a split Alpamayo frame run in two servers
that share only bytes (prefix_server.py, suffix_server.py): which frame and which message of it, and on a frame's
first message the settings it runs by. Never pickle.

Forward (prefix -> suffix), little endian:
    head     "<4sHBQQIqq"  magic b"HVAF", version 1, kind (CROSSING / ABORT), run, seq, index, stamp_ns, arrival_ns
    times    "<4d"         the prefix's ms so far for this frame: prefill, decode, unguided, expert
    opening  (index 0 only) "<iQddiidB3dB"  partition, seed, temperature, top_p, max_new_tokens, steps,
             guidance_weight, guidance, the frame's map pose x, y, yaw, pose known
    crossing wire.encode bytes (CROSSING only)
Back (suffix -> prefix): head "<4sHBQQIq" magic b"HVAB" (no arrival), then wire.encode bytes (CROSSING) or a
UTF-8 "reason\\nmessage" (REFUSED: the suffix gave the frame up and counted it).

`run` is random per prefix server: an answer to a frame of an earlier run never matches one of this run.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ...errors import InputError, expect
from ...model.plugins.alpamayo.decode import Sampling
from ...model.plugins.alpamayo.flow import FlowSettings
from ..expert_split import wire

FORWARD_MAGIC, BACK_MAGIC, VERSION = b"HVAF", b"HVAB", 1
CROSSING, ABORT, REFUSED = 1, 2, 3
FORWARD_HEAD = struct.Struct("<4sHBQQIqq")
BACK_HEAD = struct.Struct("<4sHBQQIq")
TIMES = struct.Struct("<4d")
OPENING = struct.Struct("<iQddiidB3dB")
PHASES = ("prefill", "decode", "unguided", "expert")


@dataclass(frozen=True)
class FrameSettings:
    """What one frame runs by, decided by the prefix and carried on its first message."""
    partition: int
    seed: int                       # the frame's sampler seed (reasoning, then the flow's noise)
    sampling: Sampling
    flow: FlowSettings
    guidance: bool                  # 1.5's classifier-free guidance: the route-free prompt crosses too


@dataclass(frozen=True)
class Tag:
    """Which frame a message belongs to."""
    run: int
    seq: int
    stamp_ns: int
    arrival_ns: int = 0


@dataclass
class Forward:
    tag: Tag
    index: int                      # 0, 1, ... per frame: the suffix checks none went missing
    kind: int                       # CROSSING or ABORT
    state: object = None            # a PromptState / TokensState / ExpertState (CROSSING)
    times: dict = field(default_factory=dict)      # phase -> the prefix's ms so far
    settings: FrameSettings | None = None           # index 0 only
    pose: tuple[float, float, float] | None = None  # index 0 only: the frame's map pose, when known


@dataclass
class Back:
    tag: Tag
    index: int
    kind: int                       # CROSSING or REFUSED
    state: object = None            # a TokenChoice / ActionState (CROSSING)
    reason: str = ""                # REFUSED: a diagnostics reason (nonfinite_boundary, invalid_boundary, ...)
    message: str = ""


def _opening(settings: FrameSettings, pose) -> bytes:
    s, f = settings.sampling, settings.flow
    x, y, yaw = pose if pose is not None else (0.0, 0.0, 0.0)
    return OPENING.pack(settings.partition, settings.seed, s.temperature, s.top_p, s.max_new_tokens, f.steps,
                        f.guidance_weight, int(settings.guidance), x, y, yaw, int(pose is not None))


def encode_forward(message: Forward) -> bytes:
    t = message.tag
    head = FORWARD_HEAD.pack(FORWARD_MAGIC, VERSION, message.kind, t.run, t.seq, message.index, t.stamp_ns,
                             t.arrival_ns)
    times = TIMES.pack(*(float(message.times.get(p, 0.0)) for p in PHASES))
    opening = _opening(message.settings, message.pose) if message.index == 0 else b""
    body = wire.encode(message.state) if message.kind == CROSSING else b""
    return head + times + opening + body


def _read_opening(view: memoryview, pos: int, source: str):
    expect(view.nbytes >= pos + OPENING.size, InputError, f"{source}: truncated in the frame's settings")
    (partition, seed, temperature, top_p, max_new, steps, weight, guidance, x, y, yaw,
     known) = OPENING.unpack_from(view, pos)
    settings = FrameSettings(partition, seed, Sampling(temperature, top_p, max_new), FlowSettings(steps, weight),
                             bool(guidance))
    return settings, ((x, y, yaw) if known else None), pos + OPENING.size


def decode_forward(buffer, source: str = "split Alpamayo forward message") -> Forward:
    """InputError naming what does not fit (the crossing's own checks: wire.decode)."""
    view = memoryview(buffer)
    expect(view.nbytes >= FORWARD_HEAD.size + TIMES.size, InputError, f"{source}: {view.nbytes} bytes, shorter "
           f"than its header")
    magic, version, kind, run, seq, index, stamp_ns, arrival_ns = FORWARD_HEAD.unpack_from(view, 0)
    expect(magic == FORWARD_MAGIC and version == VERSION, InputError,
           f"{source}: magic {magic!r} version {version}, expected {FORWARD_MAGIC!r} version {VERSION}")
    expect(kind in (CROSSING, ABORT), InputError, f"{source}: unknown kind {kind}")
    times = dict(zip(PHASES, TIMES.unpack_from(view, FORWARD_HEAD.size)))
    message = Forward(Tag(run, seq, stamp_ns, arrival_ns), index, kind, times=times)
    pos = FORWARD_HEAD.size + TIMES.size
    if index == 0:
        message.settings, message.pose, pos = _read_opening(view, pos, source)
    if kind == CROSSING:
        message.state = wire.decode(view[pos:], source)
    return message


def forward_tag(buffer) -> Tag | None:
    """The frame a forward message names, read from its head alone (None: no readable head): a message whose
    crossing is damaged still names the frame to refuse."""
    view = memoryview(buffer)
    if view.nbytes < FORWARD_HEAD.size:
        return None
    magic, version, _, run, seq, _, stamp_ns, arrival_ns = FORWARD_HEAD.unpack_from(view, 0)
    return Tag(run, seq, stamp_ns, arrival_ns) if (magic, version) == (FORWARD_MAGIC, VERSION) else None


def encode_back(message: Back) -> bytes:
    t = message.tag
    head = BACK_HEAD.pack(BACK_MAGIC, VERSION, message.kind, t.run, t.seq, message.index, t.stamp_ns)
    if message.kind == CROSSING:
        return head + wire.encode(message.state)
    return head + f"{message.reason}\n{message.message}".encode()


def decode_back(buffer, source: str = "split Alpamayo answer") -> Back:
    view = memoryview(buffer)
    expect(view.nbytes >= BACK_HEAD.size, InputError, f"{source}: {view.nbytes} bytes, shorter than its header")
    magic, version, kind, run, seq, index, stamp_ns = BACK_HEAD.unpack_from(view, 0)
    expect(magic == BACK_MAGIC and version == VERSION, InputError,
           f"{source}: magic {magic!r} version {version}, expected {BACK_MAGIC!r} version {VERSION}")
    expect(kind in (CROSSING, REFUSED), InputError, f"{source}: unknown kind {kind}")
    tag = Tag(run, seq, stamp_ns)
    if kind == CROSSING:
        return Back(tag, index, kind, wire.decode(view[BACK_HEAD.size:], source))
    try:
        reason, _, text = bytes(view[BACK_HEAD.size:]).decode().partition("\n")
    except UnicodeDecodeError as exc:
        raise InputError(f"{source}: a refusal that is not UTF-8 ({exc})") from None
    return Back(tag, index, kind, reason=reason, message=text)
