"""Prompts with embeddings (issue 38, item 3; model/prompt_embeddings.py): learned query embeddings in place of the
query tokens' vocabulary rows, numeric slots filled from the frame context by an MLP adaptor (SimLingo's target
point); in the prefix's embedding step, whole and chunked, and in the unsplit reference (tiny-simlingo is exact at
every cut in test_driving_heads.py)."""

import dataclasses

import numpy as np
import pytest
import torch

from hybrid_vla_ros.context import FrameContext
from hybrid_vla_ros.engine.chunking import chunk_spans
from hybrid_vla_ros.engine.embedding import FrameEmbedder, frame_embeddings
from hybrid_vla_ros.engine.stages import reference_forward
from hybrid_vla_ros.errors import ConfigError
from hybrid_vla_ros.model.inputs import encode_frame, synthetic_frame
from hybrid_vla_ros.model.presets import get_preset
from hybrid_vla_ros.model.tokenize.tokens import EGO_BYTES, SLOT
from hybrid_vla_ros.model.vla import build_model
from hybrid_vla_ros.types import Navigation


@pytest.fixture(scope="module")
def model():
    return build_model(get_preset("tiny-simlingo"))


def with_target(frame, target, goal):
    context = FrameContext.from_dict(frame.context.to_dict())
    nav = context.navigation
    context.navigation = Navigation(nav.command, nav.distance_m, goal, target, "route")
    return dataclasses.replace(frame, context=context)


def test_the_prompt_holds_the_slot_tokens_after_the_instruction_and_the_queries_last(model):
    spec = model.spec
    ids = encode_frame(synthetic_frame(spec, 0), model).input_ids[0]
    slots = (ids == SLOT).nonzero().flatten()
    assert spec.slot_tokens == 2 and slots.tolist() == [len(ids) - spec.query_tokens - EGO_BYTES - 2,
                                                        len(ids) - spec.query_tokens - EGO_BYTES - 1]
    assert model.sequence_length == len(ids)


def test_block_zero_gets_the_learned_queries_and_the_adapted_targets(model):
    frame = with_target(synthetic_frame(model.spec, 1), (12.0, -1.5), (40.0, 3.0))
    embeds = frame_embeddings(model, frame).embeds                                      # (1, S, H)
    table = model.prompt_embeddings
    with torch.no_grad():
        assert torch.equal(embeds[0, -30:], table.table()) and [q.shape[0] for q in table.queries] == [20, 10]
        adaptor = table.adaptors["target_point"]
        expected = adaptor(torch.tensor([[12.0, -1.5], [40.0, 3.0]]))                  # target, then goal
    ids = encode_frame(frame, model).input_ids[0]
    assert torch.equal(embeds[0, ids == SLOT], expected)
    # The vocabulary rows are what an un-embedded prompt would have had: they differ.
    plain = model.decoder.embed_tokens(ids)
    assert not torch.equal(plain[-30:], embeds[0, -30:]) and not torch.equal(plain[ids == SLOT], expected)
    # Chunked prefill's embedder writes the same rows at once (they are text: no camera's features land there).
    chunked = FrameEmbedder(model, frame)
    spans = chunk_spans(model, chunked.input_ids, 3)
    assert len(spans) == 3 and torch.equal(chunked.ready(spans[-1][1]), embeds)


def test_the_target_point_steers_the_plan(model):
    frame = synthetic_frame(model.spec, 2)
    left = reference_forward(model, with_target(frame, (10.0, 4.0), (30.0, 8.0)))[1]
    right = reference_forward(model, with_target(frame, (10.0, -4.0), (30.0, -8.0)))[1]
    assert not np.allclose(left.points, right.points)
    assert np.array(left.extras["route"]).shape == (20, 2)


@pytest.mark.parametrize("slots, said", [
    ([{"name": "tp", "inputs": ["weather"]}], "inputs=\\['weather'\\]"),
    ([{"name": "tp", "inputs": ["target_point", "command"]}], "of one size"),
    ([{"name": "tp", "inputs": ["target_point"]}, {"name": "tp", "inputs": ["goal_point"]}], "unique"),
    ([{"name": "tp", "inputs": ["target_point"], "hidden": [0]}], "positive widths"),
    ([{"name": "tp", "inputs": ["target_point"], "width": 3}], "unknown keys"),
])
def test_malformed_slots_are_refused_at_load(slots, said):
    with pytest.raises(ConfigError, match=said):
        dataclasses.replace(get_preset("tiny-simlingo"), prompt_slots=slots)


def test_prompt_embeddings_are_refused_for_action_tokens():
    with pytest.raises(ConfigError, match="waypoint heads"):
        dataclasses.replace(get_preset("tiny-act"), query_embeddings=True)
