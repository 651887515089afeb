"""A split Alpamayo frame's messages between two servers that share only bytes (prefix_server.py,
suffix_server.py), as HVLM messages (engine/handover/message.py, kind `alpamayo`): one entry per message naming
the frame (run, seq, stamp, arrival) and the message's index in it, the crossing's fields as the entry's parts
(crossings.py), the prefix's ms so far per phase (`times`), and on a frame's first message the settings it runs by
(`seed`, `temperature`, `top_p`, `max_new_tokens`, `flow_steps`, `guidance_weight`, `guidance`; the cut in the
header). Back (suffix -> prefix): a TokenChoice / ActionState entry, or REFUSED with `reason` and `text`.
`run` is random per prefix server: an answer to a frame of an earlier run never matches one of this run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import InputError, expect
from ...model.plugins.alpamayo.decode import Sampling
from ...model.plugins.alpamayo.flow import FlowSettings
from ..expert_split.crossings import BACK as BACK_CROSSINGS
from ..expert_split.crossings import FORWARD as FORWARD_CROSSINGS
from ..expert_split.crossings import code_of, crossing_parts, from_entry
from ..handover import message as hvlm

KIND = hvlm.KINDS["alpamayo"]
CROSSING, ABORT, REFUSED = 1, 2, 3
PHASES = ("prefill", "decode", "unguided", "expert")
OPENING = ("seed", "temperature", "top_p", "max_new_tokens", "flow_steps", "guidance_weight", "guidance")


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


@dataclass
class Back:
    tag: Tag
    index: int
    kind: int                       # CROSSING or REFUSED
    state: object = None            # a TokenChoice / ActionState (CROSSING)
    reason: str = ""                # REFUSED: a diagnostics reason (nonfinite_boundary, invalid_boundary, ...)
    message: str = ""


def _opening(settings: FrameSettings) -> dict:
    s, f = settings.sampling, settings.flow
    return dict(seed=settings.seed, temperature=s.temperature, top_p=s.top_p, max_new_tokens=s.max_new_tokens,
                flow_steps=f.steps, guidance_weight=f.guidance_weight, guidance=int(settings.guidance))


def _settings(message: hvlm.Message, source: str) -> FrameSettings:
    p = message.parts
    missing = [name for name in OPENING if name not in p]
    expect(not missing and message.partition >= 0, InputError,
           f"{source}: a frame's first message without its settings ({missing or 'partition'})")
    expect(p["guidance"] in (0, 1), InputError, f"{source}: guidance {p['guidance']}, expected 0 or 1")
    return FrameSettings(message.partition, p["seed"], Sampling(p["temperature"], p["top_p"], p["max_new_tokens"]),
                         FlowSettings(p["flow_steps"], p["guidance_weight"]), bool(p["guidance"]))


def encode_forward(message: Forward) -> bytes:
    t, crossing = message.tag, message.kind == CROSSING
    entry = hvlm.Entry(t.seq, t.stamp_ns, t.arrival_ns, message.index,
                       code_of(message.state, FORWARD_CROSSINGS, "forward") if crossing else 0,
                       parts=crossing_parts(message.state) if crossing else {})
    parts = {"times": tuple(float(message.times.get(p, 0.0)) for p in PHASES)}
    first = message.index == 0
    if first:
        parts.update(_opening(message.settings))
    return hvlm.encode(hvlm.Message(KIND, hvlm.FORWARD, [entry], parts, 0 if crossing else hvlm.ABORT,
                                    message.settings.partition if first else -1, t.run))


def _one_entry(message: hvlm.Message, source: str) -> hvlm.Entry:
    expect(len(message.entries) == 1, InputError, f"{source}: {len(message.entries)} entries, expected 1")
    return message.entries[0]


def decode_forward(buffer, source: str = "split Alpamayo forward message") -> Forward:
    """InputError naming what does not fit (an old format: OldMessageError, reason old_message)."""
    message = hvlm.decode(buffer, source, KIND, hvlm.FORWARD)
    entry = _one_entry(message, source)
    expect(message.flags & ~hvlm.ABORT == 0, InputError, f"{source}: flags {message.flags:#x} on a forward message")
    allowed = {"times", *OPENING} if entry.index == 0 else {"times"}
    extra = sorted(set(message.parts) - allowed)
    expect(not extra, InputError, f"{source}: parts {extra} have no place in message {entry.index} of a frame")
    times = message.parts.get("times", ())
    expect(len(times) == len(PHASES), InputError, f"{source}: {len(times)} phase times, expected {len(PHASES)}")
    abort = bool(message.flags & hvlm.ABORT)
    out = Forward(Tag(message.run, entry.seq, entry.stamp_ns, entry.arrival_ns), entry.index,
                  ABORT if abort else CROSSING, times=dict(zip(PHASES, times)))
    if entry.index == 0:
        out.settings = _settings(message, source)
    if not abort:
        out.state = from_entry(entry, FORWARD_CROSSINGS, source)
    return out


def forward_tag(buffer) -> Tag | None:
    """The frame a forward message names, read from its header and entry alone (None: no readable head): a
    message whose crossing is damaged still names the frame to refuse."""
    message = hvlm.peek(buffer)
    if message is None or (message.kind, message.direction, len(message.entries)) != (KIND, hvlm.FORWARD, 1):
        return None
    entry = message.entries[0]
    return Tag(message.run, entry.seq, entry.stamp_ns, entry.arrival_ns)


def encode_back(message: Back) -> bytes:
    t = message.tag
    if message.kind == CROSSING:
        entry = hvlm.Entry(t.seq, t.stamp_ns, 0, message.index, code_of(message.state, BACK_CROSSINGS, "answer"),
                           parts=crossing_parts(message.state))
        return hvlm.encode(hvlm.Message(KIND, hvlm.BACK, [entry], run=t.run))
    entry = hvlm.Entry(t.seq, t.stamp_ns, 0, message.index)
    return hvlm.encode(hvlm.Message(KIND, hvlm.BACK, [entry], {"reason": message.reason, "text": message.message},
                                    hvlm.REFUSED, run=t.run))


def decode_back(buffer, source: str = "split Alpamayo answer") -> Back:
    message = hvlm.decode(buffer, source, KIND, hvlm.BACK)
    entry = _one_entry(message, source)
    tag = Tag(message.run, entry.seq, entry.stamp_ns)
    expect(message.flags & ~hvlm.REFUSED == 0, InputError, f"{source}: flags {message.flags:#x} on an answer")
    expect(set(message.parts) <= ({"reason", "text"} if message.flags else set()), InputError,
           f"{source}: parts {sorted(message.parts)} have no place in an answer")
    if message.flags & hvlm.REFUSED:
        return Back(tag, entry.index, REFUSED, reason=message.parts.get("reason", ""),
                    message=message.parts.get("text", ""))
    return Back(tag, entry.index, CROSSING, from_entry(entry, BACK_CROSSINGS, source))
