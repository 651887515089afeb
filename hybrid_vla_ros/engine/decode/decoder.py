"""A decode policy bound to a model (ROS-free): the head and token ids it decodes over, the token each step
picks, when a frame ends, and what the frame's tokens make. Both sides of ActionFlow's cut and its sequential
reference hold one: the suffix end picks tokens (its head lives there), the prefix end knows from the same
policy when a frame leaves the pack and frees its KV ring slot.

Vocabularies. "actions": the model's action-token head (TokenHead, logits over the bins; token = base + bin).
"full": logits over every id through the model's `lm_head` when it has one, else the tied embedding table
(logits = normed hidden @ embed_tokens.weight^T, as tied-embedding LLMs such as Qwen2-0.5B compute them).
A text-answer model (spec action_head "text", OneVL) writes its plan over the whole vocabulary through its own LM
head, so both names mean that; its frame ends at the tokenizer's end-of-text ids unless the policy names others, and
its tokens are read as text into waypoints (model/tokenize/text_waypoints.py).
"""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

from ...errors import ConfigError, InputError, expect
from ...model.tokenize.text_waypoints import parse_poses, trajectory_points
from ...types import Trajectory
from .policy import DecodePolicy
from .result import ActionResult
from .sampling import greedy_index, sampled_index, step_uniform


def vocabulary_head(model, vocabulary: str) -> torch.nn.Module:
    """The module whose output (or weight) gives the logits over `vocabulary`."""
    if model.spec.action_head == "text":
        return model.action_head                                                         # (V, H)
    if vocabulary == "actions":
        return model.action_head
    head = getattr(model, "lm_head", None)
    return model.decoder.embed_tokens if head is None else head


class TokenDecoder:
    def __init__(self, model, policy: DecodePolicy | None = None):
        """Refused (ConfigError) when the model cannot decode this way: no action tokens for "actions" or for a
        default length, stop ids outside the vocabulary decoded over."""
        self.policy = policy = policy or DecodePolicy()
        self.tokenizer = getattr(model, "action_tokenizer", None)
        spec, name = model.spec, model.spec.name
        self.text = model.prompt if spec.action_head == "text" else None   # reads a text answer (ChatPrompt)
        expect(self.tokenizer is not None or self.text is not None or
               (policy.vocabulary == "full" and policy.max_tokens > 0), ConfigError,
               f"model '{name}' has a waypoint head, no action tokens: decode over the full vocabulary with "
               f"max_tokens > 0 (or use an action-token model, e.g. tiny-act)")
        if policy.vocabulary == "actions" and self.text is None:
            self.base, self.size = self.tokenizer.base, self.tokenizer.bins
        else:
            self.base, self.size = 0, vocabulary_head(model, "full").weight.shape[0]
        self.max_tokens = policy.max_tokens or (spec.answer_tokens if self.text is not None
                                                else self.tokenizer.tokens_per_frame)
        self.prompt_tokens = model.sequence_length
        self.stop_ids = frozenset(policy.stop_ids or (self.text.stop_ids if self.text is not None else ()))
        self.poses, self.values, self.dt_s = spec.num_waypoints, spec.answer_values, spec.waypoint_dt_s
        outside = sorted(i for i in self.stop_ids if not self.base <= i < self.base + self.size)
        expect(not outside, ConfigError,
               f"decode stop_ids {outside}: outside the {self.label} [{self.base}, "
               f"{self.base + self.size}) of model '{name}' (never decoded, so they would never stop a frame)")

    @property
    def label(self) -> str:
        return "action vocabulary" if self.policy.vocabulary == "actions" and self.text is None else "full vocabulary"

    @property
    def slot_tokens(self) -> int:
        """KV positions one frame needs: its prompt + its tokens but the last (never fed back)."""
        return self.prompt_tokens + self.max_tokens - 1

    def head(self, model) -> torch.nn.Module:
        return vocabulary_head(model, self.policy.vocabulary)

    def logits(self, head: torch.nn.Module, normed: torch.Tensor) -> torch.Tensor:
        """normed final hidden rows (n, H) -> logits (n, size) over this vocabulary."""
        if self.policy.vocabulary == "actions":
            return head(normed)
        return F.linear(normed, head.weight)                                             # (n, V)

    def choose(self, logits: torch.Tensor, stamp_ns: int, index: int) -> int:
        """Token `index` (0 = the one after the prompt) of the frame stamped `stamp_ns`, from its logits (size,)."""
        p = self.policy
        if not p.sample:
            return self.base + greedy_index(logits)
        return self.base + sampled_index(logits, p.temperature, p.top_p, step_uniform(p.seed, stamp_ns, index))

    def index_at(self, start: int, count: int) -> int:
        """The token index a packed segment's last row decodes: rows at KV positions [start, start + count);
        a prefill (0, S) gives token 0, the decode row feeding token i - 1 (at position S + i - 1) token i."""
        return start + count - self.prompt_tokens

    def ended(self, tokens: list[int]) -> str:
        """Why a frame with these tokens is done ("stop", "max_tokens"); "" while it goes on."""
        if tokens and tokens[-1] in self.stop_ids:
            return "stop"
        return "max_tokens" if len(tokens) >= self.max_tokens else ""

    def trajectory(self, tokens: list[int], seq: int, stamp_ns: int, partition: int) -> Trajectory | None:
        """The tokens as waypoints when they are exactly one action (the action vocabulary, all its tokens), or a
        text answer read into poses (InputError when it is no plan)."""
        tokenizer = self.tokenizer
        if self.text is not None:
            return Trajectory(points=trajectory_points(self.answer_poses(tokens), self.dt_s), seq=seq,
                              stamp_ns=stamp_ns, partition=partition)
        if self.policy.vocabulary != "actions" or len(tokens) != tokenizer.tokens_per_frame:
            return None
        return Trajectory(points=tokenizer.waypoints(tokens), seq=seq, stamp_ns=stamp_ns, partition=partition)

    def answer_poses(self, tokens: list[int]) -> np.ndarray:
        """A text answer's tokens -> (poses, values); an InputError saying what is wrong when they are no plan."""
        return parse_poses(self.text.text(tokens), self.poses, self.values, self.text.end_texts)

    def result(self, tokens: list[int], seq: int, stamp_ns: int, partition: int, latency_s: float) -> ActionResult:
        """A frame whose decode ended: its tokens, their count and why, its trajectory when they make one. A text
        answer that is no plan has its tokens and the error (reason answer_unreadable), no trajectory."""
        try:
            trajectory = self.trajectory(tokens, seq, stamp_ns, partition)
        except InputError as exc:
            return ActionResult(seq, stamp_ns, list(tokens), None, latency_s, str(exc), "answer_unreadable",
                                ended=self.ended(tokens))
        return ActionResult(seq, stamp_ns, list(tokens), trajectory, latency_s, ended=self.ended(tokens))

    def in_vocabulary(self, token: int) -> bool:
        return self.base <= token < self.base + self.size
