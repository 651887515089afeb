"""Chunked prefill across the cut (engine/chunking.py, engine/chunked_stages.py): chunked == HF's own unchunked
forward at every partition and chunking, k = 1 bit-exact; the suffix takes a frame's chunks only in order."""

import numpy as np
import pytest
import torch

from hybrid_vla_ros.engine.chunked_stages import ChunkOrderError
from hybrid_vla_ros.engine.chunking import chunk_spans, parse_chunks
from hybrid_vla_ros.engine.stages import PrefixStage, SuffixStage, reference_forward
from hybrid_vla_ros.errors import ConfigError, InputError
from hybrid_vla_ros.model.inputs import encode_frame, synthetic_frame
from hybrid_vla_ros.model.load import load_vla

CHUNKINGS = (1, 2, 4, "camera")
TOLERANCE_M = 1e-4   # the bound on a chunked trajectory (different matmul shapes change the last bits)
# (a chunk's GEMMs have C rows, not S, and its attention reads the earlier chunks' keys: other kernel blocking, so
# chunks > 1 are compared within fp32 rounding over the model's depth, never bit for bit)


def chunked_forward(model, partition, frame, chunks):
    """-> (every chunk's final hidden state joined (P, S, H), trajectory, number of chunks)."""
    model.reset_memory()   # a scene encoder's memory: every run starts from the same state
    prefix, suffix = PrefixStage(model, partition), SuffixStage(model, partition)
    hidden, trajectory, count = [], None, 0
    for state in prefix.run_chunks(frame, chunks):
        rows, out = suffix.forward(state)
        hidden.append(rows)
        count += 1
        assert (out is None) == (not state.last_chunk)
        trajectory = out or trajectory
    return torch.cat(hidden, dim=1), trajectory, count


@pytest.mark.parametrize("preset", ["tiny", "tiny-llava", "tiny-qwen3vl", "tiny-internvl", "tiny-scene"])
def test_chunked_matches_unchunked_forward_at_every_partition(preset):
    model = load_vla(preset=preset)
    frame = synthetic_frame(model.spec, 3)
    model.reset_memory()
    ref_hidden, ref = reference_forward(model, frame)
    worst = {}
    for partition in range(model.num_blocks + 1):
        for chunks in CHUNKINGS:
            if chunks == "camera" and model.family.scene_encoded:
                with pytest.raises(ConfigError, match="image block"):
                    chunked_forward(model, partition, frame, chunks)
                continue
            hidden, trajectory, count = chunked_forward(model, partition, frame, chunks)
            assert count == (model.spec.num_cameras if chunks == "camera" else chunks)
            diff = float((hidden - ref_hidden).abs().max())
            if chunks == 1:   # the whole frame: split vs HF's forward, the same kernels (test_partition.py, EXACT)
                assert diff == 0.0 and np.array_equal(trajectory.points, ref.points), (partition, chunks)
            assert np.abs(trajectory.points - ref.points).max() <= TOLERANCE_M, (partition, chunks)
            worst[chunks] = max(worst.get(chunks, 0.0), diff)
    print(f"{preset}: largest hidden difference by chunking {worst}")
    assert all(d <= 1e-5 for d in worst.values()), worst


def test_chunk_spans_cover_the_frame_and_keep_the_query_tokens_together():
    model = load_vla(preset="tiny")
    ids = encode_frame(synthetic_frame(model.spec, 0), model).input_ids
    seq_len = ids.shape[1]
    for chunks in (2, 3, 4, 7):
        spans = chunk_spans(model, ids, chunks)
        assert spans[0][0] == 0 and spans[-1][1] == seq_len and len(spans) == chunks
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
        assert spans[-1][1] - spans[-1][0] >= model.query_tokens
    per_camera = chunk_spans(model, ids, "camera")
    image = (ids[0] == model.prompt.image_token_id).nonzero().flatten()
    assert len(per_camera) == model.spec.num_cameras
    assert per_camera[0][1] <= int(image[-1])   # the first chunk ends before the last camera's tokens


@pytest.mark.parametrize("value", [0, 65, -1, 2.5, "two", True, None])
def test_bad_chunks_values_are_refused_with_the_range(value):
    with pytest.raises(ConfigError, match="chunks="):
        parse_chunks(value)
    assert parse_chunks("4") == 4 and parse_chunks("camera") == "camera"


def test_too_many_chunks_for_the_prompt_are_refused():
    model = load_vla(preset="tiny")
    with pytest.raises(ConfigError, match="at most"):
        list(PrefixStage(model, 1).run_chunks(synthetic_frame(model.spec, 0), 64))


def test_a_prefix_lm_family_is_refused(monkeypatch):
    model = load_vla(preset="tiny")
    monkeypatch.setattr(type(model.family), "causal_prompt", False)
    with pytest.raises(ConfigError, match="prefix-LM"):
        list(PrefixStage(model, 1).run_chunks(synthetic_frame(model.spec, 0), 2))


def _states(model, partition, seq, chunks=4):
    return list(PrefixStage(model, partition).run_chunks(synthetic_frame(model.spec, seq), chunks))


def test_suffix_refuses_out_of_order_and_foreign_chunks_and_drops_the_frame_once(tiny_models):
    model = tiny_models["tiny"]
    suffix = SuffixStage(model, 2)
    a, b = _states(model, 2, 0), _states(model, 2, 1)
    assert suffix.run(a[0]) is None
    with pytest.raises(ChunkOrderError, match="expected chunk 1/4"):
        suffix.run(a[2])                                     # chunk 1 skipped: frame 0 cannot complete
    assert suffix.chunks.take_abandoned() == [0] and suffix.chunks.take_abandoned() == []
    with pytest.raises(ChunkOrderError, match="not the frame being assembled"):
        suffix.run(a[3])                                     # its frame is gone: refused, not counted again
    assert suffix.chunks.take_abandoned() == []
    suffix.run(b[0])
    with pytest.raises(ChunkOrderError, match="not the frame being assembled"):
        suffix.run(a[1])                                     # another frame's chunk: refused, frame 1 intact
    for state in b[1:-1]:
        assert suffix.run(state) is None
    assert suffix.run(b[-1]).seq == 1 and suffix.chunks.take_abandoned() == []


def test_a_new_frame_abandons_an_unfinished_one_and_results_stay_exact(tiny_models):
    model = tiny_models["tiny"]
    suffix = SuffixStage(model, 2)
    a, b = _states(model, 2, 0), _states(model, 2, 1)
    suffix.run(a[0]), suffix.run(a[1])
    trajectory = None
    for state in b:
        trajectory = suffix.run(state) or trajectory
    assert suffix.chunks.take_abandoned() == [0]
    _, ref = reference_forward(model, synthetic_frame(model.spec, 1))
    assert np.abs(trajectory.points - ref.points).max() <= TOLERANCE_M


def test_bad_chunk_shapes_and_non_finite_chunks_are_refused_with_the_reason(tiny_models):
    model = tiny_models["tiny"]
    suffix = SuffixStage(model, 2)
    states = _states(model, 2, 0)
    states[0].hidden = states[0].hidden[:, :-1]              # shorter than its position ids
    with pytest.raises(InputError, match="position_ids shape"):
        suffix.run(states[0])
    states = _states(model, 2, 0)
    states[0].hidden = states[0].hidden.clone()
    states[0].hidden[0, 0, 0] = float("nan")
    with pytest.raises(InputError) as info:
        suffix.run(states[0])
    assert getattr(info.value, "reason", "") == "nonfinite_boundary"
    states = _states(model, 2, 0)
    states[0].chunk_start = 1                                # chunk 0 must start at token 0
    with pytest.raises(ChunkOrderError, match="starts at token 1"):
        suffix.run(states[0])
    states = _states(model, 2, 0)
    states[-1].chunk_start += 1                              # the last chunk would end past the frame
    for state in states[:-1]:
        suffix.run(state)
    with pytest.raises(InputError, match="inside the frame's"):
        suffix.run(states[-1])
    assert suffix.chunks.take_abandoned() == [0]


def test_a_partition_move_applies_between_frames_only(tiny_models):
    model = tiny_models["tiny"]
    prefix, suffix = PrefixStage(model, 1, zone=(1, 3)), SuffixStage(model, 1, zone=(1, 3))
    chunks = prefix.run_chunks(synthetic_frame(model.spec, 0), 4)
    first = next(chunks)
    prefix.set_partition(3)                                  # mid-frame: this frame stays at 1
    rest = list(chunks)
    assert {s.partition for s in [first, *rest]} == {1}
    trajectory = None
    for state in [first, *rest]:
        trajectory = suffix.run(state) or trajectory
    assert trajectory.partition == 1
    assert {s.partition for s in prefix.run_chunks(synthetic_frame(model.spec, 1), 4)} == {3}


# ---- through the cross-frame pipeline (engine/pipeline/cross_frame.py) ----------------------------------------

def _pipeline(model, partition, suffix=None, **config):
    from hybrid_vla_ros.engine.pipeline.cross_frame import Pipeline, PipelineConfig
    return Pipeline(PrefixStage(model, partition), suffix or SuffixStage(model, partition),
                    PipelineConfig(**config)).start()


@pytest.mark.parametrize("chunks,max_in_flight", [(4, 1), (4, 2), ("camera", 2)])
def test_the_pipeline_serves_chunked_frames_in_order_equal_to_whole_frames(tiny_models, chunks, max_in_flight):
    model = tiny_models["tiny"]
    inputs = [synthetic_frame(model.spec, seq) for seq in range(6)]
    whole, chunked = _pipeline(model, 2, max_in_flight=max_in_flight), _pipeline(model, 2, max_in_flight=max_in_flight,
                                                                                  chunks=chunks)
    for frame in inputs:
        whole.submit(frame), chunked.submit(frame)
    a, b = whole.finish(), chunked.finish()
    assert [r.seq for r in b] == list(range(6)) and all(r.ok for r in b), [r.error for r in b]
    assert chunked.stats.completed == 6 and chunked.chunk_count == (4 if chunks == 4 else model.spec.num_cameras)
    for x, y in zip(a, b):
        assert np.abs(x.trajectory.points - y.trajectory.points).max() <= TOLERANCE_M
        assert y.suffix_busy_s > 0 and y.latency_ms > 0


class FailingChunkSuffix(SuffixStage):
    """The real suffix that fails on one chunk of one frame (a fault double: a chunk refused mid-frame)."""
    fail = (2, 1)   # (frame seq, chunk index)

    def run(self, state):
        if (state.seq, state.chunk_index) == self.fail:
            self.chunks.abandon()
            raise InputError(f"injected failure at chunk {state.chunk_index} of frame {state.seq}")
        return super().run(state)


def test_a_chunk_failing_mid_frame_drops_that_frame_once_and_the_next_is_served(tiny_models):
    model = tiny_models["tiny"]
    pipe = _pipeline(model, 2, FailingChunkSuffix(model, 2), max_in_flight=2, chunks=4)
    for seq in range(5):
        pipe.submit(synthetic_frame(model.spec, seq))
    results = pipe.finish()
    assert [r.seq for r in results] == list(range(5))
    failed = [r for r in results if not r.ok]
    assert [r.seq for r in failed] == [2] and failed[0].failed_stage == "suffix"
    assert "chunk 1 of frame 2" in failed[0].error
    assert pipe.stats.completed == 4 and pipe.stats.failed == 1
    assert pipe.handover_pending() == 0   # the failed frame's later chunks were taken, not left behind


def test_a_frame_the_prefix_cannot_chunk_is_reported_once_and_the_next_is_served(tiny_models):
    model = tiny_models["tiny"]
    pipe = _pipeline(model, 2, max_in_flight=2, chunks=4)
    good, bad = synthetic_frame(model.spec, 0), synthetic_frame(model.spec, 1)
    bad.images = bad.images[:1]                                # a camera missing
    for frame in (good, bad, synthetic_frame(model.spec, 2)):
        pipe.submit(frame)
    results = pipe.finish()
    assert [(r.seq, r.ok) for r in results] == [(0, True), (1, False), (2, True)]
    assert results[1].failed_stage == "prefix" and "camera images" in results[1].error


def test_chunks_that_the_model_cannot_take_are_refused_when_the_pipeline_is_built():
    from hybrid_vla_ros.engine.pipeline.cross_frame import PipelineConfig
    with pytest.raises(ConfigError, match="chunks="):
        PipelineConfig(chunks=0)
    model = load_vla(preset="tiny-scene")
    with pytest.raises(ConfigError, match="image block"):
        _pipeline(model, 1, chunks="camera")


def test_the_prefix_encodes_camera_by_camera_as_its_chunks_reach_them(monkeypatch):
    """The suffix can start on camera 0's tokens while the prefix still has later cameras to encode."""
    model = load_vla(preset="tiny")
    family, calls = type(model.family), []
    original = family.frame_features
    monkeypatch.setattr(family, "frame_features", lambda self, *a: calls.append(1) or original(self, *a))
    chunks = PrefixStage(model, 2).run_chunks(synthetic_frame(model.spec, 0), "camera")
    next(chunks)
    assert len(calls) == 1                       # camera 0 only, before the first chunk is handed over
    rest = list(chunks)
    assert len(calls) == model.spec.num_cameras and len(rest) == model.spec.num_cameras - 1
    calls.clear()
    list(PrefixStage(model, 2).run_chunks(synthetic_frame(model.spec, 0), 1))
    assert len(calls) == 1                       # the whole frame at once when unchunked


def test_a_scene_encoder_encodes_the_whole_frame_at_the_first_chunk(monkeypatch):
    model = load_vla(preset="tiny-scene")
    family, calls = type(model.family), []
    original = family.frame_features
    monkeypatch.setattr(family, "frame_features", lambda self, *a: calls.append(1) or original(self, *a))
    chunks = PrefixStage(model, 1).run_chunks(synthetic_frame(model.spec, 0), 4)
    next(chunks)
    assert len(calls) == 1
    list(chunks)
    assert len(calls) == 1


class FailingMidFramePrefix(PrefixStage):
    """The real prefix whose frame 1 fails after two of its chunks were handed over (a fault double)."""

    def run_chunks(self, frame, chunks=1):
        for index, state in enumerate(super().run_chunks(frame, chunks)):
            if frame.seq == 1 and index == 2:
                raise RuntimeError("injected: the prefix fails at chunk 2 of frame 1")
            yield state


class SlowChunkSuffix(SuffixStage):
    """The real suffix, slower per chunk (a timing double: chunks of a failing frame queue up before it)."""

    def run(self, state):
        import time
        time.sleep(0.02)
        return super().run(state)


def test_a_prefix_failing_mid_frame_leaves_nothing_behind_in_the_handover(tiny_models):
    from hybrid_vla_ros.engine.pipeline.cross_frame import Pipeline, PipelineConfig
    model = tiny_models["tiny"]
    pipe = Pipeline(FailingMidFramePrefix(model, 2), SlowChunkSuffix(model, 2),
                    PipelineConfig(max_in_flight=2, chunks=4)).start()
    for seq in range(4):
        pipe.submit(synthetic_frame(model.spec, seq))
    results = pipe.finish()
    assert [(r.seq, r.ok) for r in results] == [(0, True), (1, False), (2, True), (3, True)]
    assert results[1].failed_stage == "prefix" and "chunk 2 of frame 1" in results[1].error
    assert pipe.handover_pending() == 0       # chunks 0 and 1 of frame 1 were taken from the registry


def test_chunk_spans_give_exactly_k_spans_even_when_the_query_tokens_crowd_the_end():
    from types import SimpleNamespace
    model = SimpleNamespace(query_tokens=4, spec=SimpleNamespace(name="short"))
    for seq_len, k in ((10, 7), (12, 9), (40, 8), (9, 6)):
        spans = chunk_spans(model, torch.zeros(1, seq_len, dtype=torch.long), k)
        assert len(spans) == k and spans[-1][1] - spans[-1][0] >= 4 and spans[-1][1] == seq_len, (seq_len, k, spans)
        assert all(b > a for a, b in spans) and all(x[1] == y[0] for x, y in zip(spans, spans[1:]))


def test_a_chunked_sender_raises_the_in_process_registry_bound_and_never_lowers_it():
    from hybrid_vla_ros.engine.handover.transport import InProcessTransport
    registry = InProcessTransport(max_pending=64)
    registry.reserve(2 * 8)
    assert registry.max_pending == 64
    registry.reserve(16 * 8)
    assert registry.max_pending == 128
    registry.reserve(4)
    assert registry.max_pending == 128
