"""How a frame's tokens are decoded after its prefill (ROS-free): greedy or sampled, over the action-token bins or
the whole vocabulary, until a stop token or a maximum length. One policy is shared by ActionFlow's packed engine
(engine/actionflow/packing.py, its prefix and suffix servers) and its sequential reference (reference.py): both
bind it to the model (engine/decode/decoder.py) and so pick the same token at every step.

The policy is plain data, checked when it is made: a value out of range is a ConfigError that says which value,
what is allowed and why. What depends on the model (stop ids inside the chosen vocabulary, a default length) is
checked when it is bound (TokenDecoder).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...errors import ConfigError, expect

VOCABULARIES = ("actions", "full")
MAX_TEMPERATURE = 100.0
MAX_TOKENS = 1024        # each KV ring slot holds prompt + max_tokens - 1 tokens, on both sides of the cut
MAX_STOP_IDS = 64
SEED_LIMIT = 1 << 63


@dataclass(frozen=True)
class DecodePolicy:
    """vocabulary: "actions" = the action-token bins only (ids base .. base + bins - 1: what a trajectory is made
    of); "full" = every id of the vocabulary (text reasoning, "chain of causation"; no trajectory).
    sample: False = greedy (argmax; temperature, top_p and seed unused); True = one draw per step from
    softmax(logits / temperature) restricted to the smallest set of most likely tokens whose mass reaches top_p,
    drawn with a torch.Generator seeded from (seed, the frame's stamp, the step): the same on any process.
    stop_ids: a frame ends right after it decodes one of them (the stop token is kept in its tokens).
    max_tokens: a frame ends after this many tokens at the latest; 0 = the model's action length."""
    vocabulary: str = "actions"
    sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    stop_ids: tuple[int, ...] = ()
    max_tokens: int = 0

    def __post_init__(self):
        object.__setattr__(self, "stop_ids", tuple(self.stop_ids))
        check_choice(self.vocabulary, self.sample)
        check_sampling(self.temperature, self.top_p, self.seed)
        check_lengths(self.stop_ids, self.max_tokens)

    @classmethod
    def from_params(cls, params: dict, prefix: str = "decode.") -> "DecodePolicy":
        """From a node's flat parameters (decode.vocabulary, decode.sample, ...); stop_ids [-1] = none (ROS
        parameter files cannot carry an empty typed array)."""
        stops = tuple(i for i in params[f"{prefix}stop_ids"] if i != -1)
        return cls(params[f"{prefix}vocabulary"], params[f"{prefix}sample"], params[f"{prefix}temperature"],
                   params[f"{prefix}top_p"], params[f"{prefix}seed"], stops, params[f"{prefix}max_tokens"])


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_choice(vocabulary, sample) -> None:
    expect(vocabulary in VOCABULARIES, ConfigError,
           f"decode vocabulary={vocabulary!r}: expected one of {VOCABULARIES} (actions: the action-token bins that "
           f"make a trajectory; full: every token id, for text reasoning)")
    expect(isinstance(sample, bool), ConfigError,
           f"decode sample={sample!r}: expected true (sampled) or false (greedy)")


def check_sampling(temperature, top_p, seed) -> None:
    expect(isinstance(temperature, (int, float)) and not isinstance(temperature, bool) and
           math.isfinite(temperature) and 0 < temperature <= MAX_TEMPERATURE, ConfigError,
           f"decode temperature={temperature!r}: expected a number in (0, {MAX_TEMPERATURE:g}] (the logits are "
           f"divided by it before the softmax: 0 would divide by zero; for greedy decoding set sample false)")
    expect(isinstance(top_p, (int, float)) and not isinstance(top_p, bool) and math.isfinite(top_p) and
           0 < top_p <= 1, ConfigError,
           f"decode top_p={top_p!r}: expected a number in (0, 1] (the probability mass of the most likely tokens a "
           f"draw keeps; 1 keeps them all, 0 would keep none)")
    expect(is_int(seed) and 0 <= seed < SEED_LIMIT, ConfigError,
           f"decode seed={seed!r}: expected an integer in [0, 2^63) (seeds every frame's draws with its stamp)")


def check_lengths(stop_ids, max_tokens) -> None:
    expect(is_int(max_tokens) and 0 <= max_tokens <= MAX_TOKENS, ConfigError,
           f"decode max_tokens={max_tokens!r}: expected an integer in [0, {MAX_TOKENS}] (0 = the model's action "
           f"length; every KV ring slot holds the prompt + max_tokens - 1 tokens on both sides of the cut)")
    expect(len(stop_ids) <= MAX_STOP_IDS and all(is_int(i) and i >= 0 for i in stop_ids), ConfigError,
           f"decode stop_ids={list(stop_ids)[:8]}: expected at most {MAX_STOP_IDS} token ids >= 0")
