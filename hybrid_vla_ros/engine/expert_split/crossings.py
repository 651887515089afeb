"""What crosses the cut of a split Alpamayo frame, one small dataclass per kind (as bytes: HVLM parts,
engine/handover/message.py; the crossing code is its place in KINDS, from 1).

prefix -> suffix (hidden states after block p - 1; checked finite on arrival):
    PromptState    once per prompt: the prefill's boundary (stream 0; stream 1 = 1.5's route-free prompt)
    TokensState    each decode step (one token), and 1.5's route-free cache fed the reasoning (T tokens)
    ExpertState    each Euler step: the action tokens after expert layer p - 1, one row per cache
suffix -> prefix:
    TokenChoice    each sampled token, whether the prefix feeds it, whether the decode ends
    ActionState    each Euler step's input: the action state x and its flow time t
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from ...errors import InputError, expect, expect_finite
from ...types import DeepStack
from ..handover import message as hvlm

GUIDED, UNGUIDED = 0, 1   # streams: the prompt with its route, 1.5's prompt without it (guidance only)


@dataclass
class PromptState:
    hidden: torch.Tensor             # (1, S, H) after VLM block p - 1 (the embeddings at p = 0)
    positions: torch.Tensor          # (3, 1, S) M-RoPE ids
    deepstack: DeepStack | None      # positions (n,), features (k - p, n, H): DeepStack still to add at >= p
    rope_delta: int                  # M-RoPE position of sequence index s is s + rope_delta (after the prompt)
    stream: int                      # GUIDED or UNGUIDED
    history_xyz: torch.Tensor        # (1, T, 3) ego history in the t0 frame: the suffix's trajectory needs it
    history_rot: torch.Tensor        # (1, T, 3, 3)


@dataclass
class TokensState:
    hidden: torch.Tensor             # (1, T, H) after VLM block p - 1; T = 1 per decode step
    positions: torch.Tensor          # (3, 1, T)
    stream: int


@dataclass
class TokenChoice:
    token: int                       # the sampled reasoning token
    feed: bool                       # the prefix feeds it (False only at max_new_tokens without the stop)
    done: bool                       # the decode ends with it


@dataclass
class ActionState:
    x: torch.Tensor                  # (1, N, 2) action state at flow time t (expert dtype, then fp32)
    t: torch.Tensor                  # (1, 1, 1)
    step: int                        # Euler step index 0 .. steps - 1


@dataclass
class ExpertState:
    hidden: torch.Tensor             # (G, N, H_e) after expert layer p - 1 (action_in_proj's output at p = 0);
    step: int                        # G = 1, or 2 with guidance: row 0 the guided cache, row 1 the route-free


KINDS = (PromptState, TokensState, TokenChoice, ActionState, ExpertState)
FORWARD = (PromptState, TokensState, ExpertState)
BACK = (TokenChoice, ActionState)


def code_of(state, allowed, source: str) -> int:
    """The crossing code of `state` (its place in KINDS, from 1); InputError unless it may cross this way."""
    expect(type(state) in allowed, InputError, f"{source}: a {type(state).__name__} cannot cross this way")
    return KINDS.index(type(state)) + 1


def from_entry(entry: hvlm.Entry, allowed, source: str):
    """The crossing an HVLM entry carries, each field checked (InputError naming what does not fit)."""
    expect(1 <= entry.crossing <= len(KINDS) and KINDS[entry.crossing - 1] in allowed, InputError,
           f"{source}: crossing code {entry.crossing} cannot cross this way")
    return crossing_from_parts(KINDS[entry.crossing - 1], entry.parts, source)


def roundtrip(state):
    """Through HVLM bytes and back: what a transport between two processes delivers."""
    allowed = FORWARD if type(state) in FORWARD else BACK
    entry = hvlm.Entry(0, 0, crossing=code_of(state, allowed, "crossing"), parts=crossing_parts(state))
    direction = hvlm.FORWARD if allowed is FORWARD else hvlm.BACK
    data = hvlm.encode(hvlm.Message(hvlm.KINDS["alpamayo"], direction, [entry]))
    return from_entry(hvlm.decode(data, "crossing").entries[0], allowed, "crossing")


def _boundary(hidden: torch.Tensor, width: int, where: str) -> None:
    ok = isinstance(hidden, torch.Tensor) and hidden.dim() == 3 and hidden.shape[-1] == width
    expect(ok, InputError, f"{where}: hidden of shape {tuple(getattr(hidden, 'shape', ()))}, expected "
           f"(B, T, {width})")
    expect_finite(hidden, "nonfinite_boundary", f"{where}: hidden state")


def check_prompt(state: PromptState, width: int) -> None:
    """InputError / NonFiniteError (reason nonfinite_boundary) unless the suffix can take it."""
    where = f"split Alpamayo prompt boundary (stream {state.stream})"
    _boundary(state.hidden, width, where)
    expect(tuple(state.positions.shape) == (3, 1, state.hidden.shape[1]), InputError,
           f"{where}: positions {tuple(state.positions.shape)}, expected (3, 1, {state.hidden.shape[1]})")
    if state.deepstack is not None:
        expect_finite(state.deepstack.features, "nonfinite_boundary", f"{where}: DeepStack features")


def check_tokens(state: TokensState, width: int) -> None:
    where = f"split Alpamayo decode boundary (stream {state.stream})"
    _boundary(state.hidden, width, where)
    expect(tuple(state.positions.shape) == (3, 1, state.hidden.shape[1]), InputError,
           f"{where}: positions {tuple(state.positions.shape)}, expected (3, 1, {state.hidden.shape[1]})")


def check_expert(state: ExpertState, width: int, rows: int, step: int) -> None:
    where = f"split Alpamayo expert boundary (Euler step {state.step})"
    expect(state.step == step, InputError, f"{where}: expected Euler step {step}")
    _boundary(state.hidden, width, where)
    expect(state.hidden.shape[0] == rows, InputError, f"{where}: {state.hidden.shape[0]} rows, expected {rows} "
           f"(one per cache)")


def check_action(state: ActionState, step: int) -> None:
    where = f"split Alpamayo action state (Euler step {state.step})"
    expect(state.step == step, InputError, f"{where}: expected Euler step {step}")
    expect_finite(state.x, "nonfinite_boundary", where)


def nbytes(state) -> int:
    """Tensor bytes a crossing carries (what a transport moves besides a small header)."""
    total = 0
    for value in vars(state).values():
        if isinstance(value, torch.Tensor):
            total += value.numel() * value.element_size()
        elif isinstance(value, DeepStack):
            total += value.nbytes()
    return total


def crossing_parts(state) -> dict:
    """A crossing dataclass's fields as parts (a DeepStack as ds_first / ds_positions / ds_features; None left
    out; a bool as 0 / 1)."""
    parts = {}
    for f in fields(state):
        value = getattr(state, f.name)
        if isinstance(value, DeepStack):
            parts.update(ds_first=value.first_block, ds_positions=value.positions, ds_features=value.features)
        elif value is not None:
            parts[f.name] = int(value) if isinstance(value, bool) else value
    return parts


def crossing_from_parts(cls, parts: dict, source: str):
    """The crossing `crossing_parts` wrote, each field's kind checked; a part the crossing has no field for is
    refused."""
    values, used = {}, set()
    for f in fields(cls):
        if f.type == "DeepStack | None":
            ds = ("ds_first", "ds_positions", "ds_features")
            present = [n in parts for n in ds]
            expect(all(present) or not any(present), InputError, f"{source}: a DeepStack needs all of {ds}")
            values[f.name] = DeepStack(parts[ds[1]], parts[ds[2]], parts[ds[0]]) if all(present) else None
            used.update(ds)
            continue
        expect(f.name in parts, InputError, f"{source}: a {cls.__name__} without its {f.name!r}")
        value = parts[f.name]
        if f.type == "bool":
            expect(value in (0, 1), InputError, f"{source}: {f.name!r} is {value}, expected 0 or 1")
            value = bool(value)
        values[f.name] = value
        used.add(f.name)
    extra = sorted(set(parts) - used)
    expect(not extra, InputError, f"{source}: a {cls.__name__} has no field for parts {extra}")
    return cls(**values)
