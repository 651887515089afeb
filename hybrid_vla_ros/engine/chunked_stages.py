"""The two stages chunk by chunk (chunked prefill across the cut; primitives in engine/chunking.py).

Prefix: the frame's token embeddings, then chunk by chunk the image features of the cameras whose tokens the chunk
reaches (engine/embedding.py FrameEmbedder; a scene encoder: the whole frame at the first chunk) and blocks
[0, p) with its own per-frame keys; each chunk's boundary state is yielded as soon as it is done. Suffix: blocks [p, L) on each
chunk in order with the keys of the frame's earlier chunks, the final norm and the head on the last chunk.
The suffix takes one frame's chunks at a time, in order: a chunk out of order or from another frame is refused
with the reason, and a frame that cannot complete (a chunk lost or refused) is dropped whole, reported once.
"""

from __future__ import annotations

import time
from typing import Iterator

import torch

from ..errors import InputError, expect, expect_finite
from ..model.plugins.head_inputs import reads_sequence
from ..types import BoundaryState, Frame, Trajectory
from .chunking import FrameKV, OpenFrame, check_chunkable, chunk_mask, chunk_spans, run_blocks_chunk
from .embedding import FrameEmbedder
from .placement import check_boundary_dtype


class ChunkOrderError(InputError):
    """A chunk that is not the next one of the frame the suffix is assembling (or of a new frame)."""
    reason = "chunk_out_of_order"


@torch.inference_mode()
def prefix_chunks(stage, frame: Frame, chunks) -> Iterator[BoundaryState]:
    """PrefixStage `stage`, one frame -> its chunks' boundary states, in order (a generator: the caller hands
    chunk i over before chunk i + 1 is computed). The partition is read once: a move applies between frames."""
    t0 = time.perf_counter()
    model, place = stage.model, stage.placement
    check_chunkable(model, chunks)
    inputs = FrameEmbedder(model, frame, place)          # token embeddings now, each camera's features when due
    position_ids, attention_mask = inputs.position_ids, torch.ones_like(inputs.input_ids)  # (.., P, S), (P, S)
    partition, seq_len = stage.partition, inputs.input_ids.shape[1]
    spans = chunk_spans(model, inputs.input_ids, chunks)
    kv = FrameKV(seq_len)
    for index, (start, end) in enumerate(spans):
        c0 = time.perf_counter()
        embeds = inputs.ready(end)                                                     # (P, S, H) through `end`
        ds = inputs.deepstack(start, end)
        hidden = run_blocks_chunk(model.decoder, stage.blocks[:partition], embeds[:, start:end],
                                  position_ids[..., start:end], chunk_mask(attention_mask, start, end), kv, 0, ds)
        place.synchronize()
        now = time.perf_counter()
        yield BoundaryState(hidden=hidden, position_ids=position_ids[..., start:end],
                            attention_mask=attention_mask[:, start:end],
                            deepstack=ds.from_block(partition) if ds is not None else None, partition=partition,
                            seq=frame.seq, stamp_ns=frame.stamp_ns, query_index=seq_len - 1,
                            arrival_ns=frame.arrival_ns, chunk_index=index, chunk_count=len(spans), chunk_start=start,
                            context=frame.context,
                            timings={"prefix_ms": (now - t0) * 1e3, "chunk_ms": (now - c0) * 1e3})


class ChunkedSuffix:
    """The suffix side of chunked prefill for one SuffixStage: the frame being assembled and its keys."""

    def __init__(self, stage):
        self.stage = stage
        self.open: OpenFrame | None = None
        self.abandoned: list[int] = []   # seqs of frames dropped unfinished (take_abandoned() reports each once)

    def take_abandoned(self) -> list[int]:
        seqs, self.abandoned = self.abandoned, []
        return seqs

    def abandon(self) -> None:
        """Drop the frame being assembled (its chunks will not complete)."""
        if self.open is not None:
            self.abandoned.append(self.open.seq)
            self.open = None

    def run(self, state: BoundaryState) -> Trajectory | None:
        return self.forward(state)[1]

    @torch.inference_mode()
    def forward(self, state: BoundaryState) -> tuple[torch.Tensor, Trajectory | None]:
        """One chunk -> (its final normed hidden state (P, C, H), the trajectory on the last chunk else None)."""
        frame = self._admit(state)
        t0 = time.perf_counter()
        stage, place, model = self.stage, self.stage.placement, self.stage.model
        start, end = state.chunk_start, state.chunk_start + state.hidden.shape[1]
        frame.masks.append(state.attention_mask.to(place.suffix_device))
        hidden = state.hidden.to(place.suffix_device, place.suffix_dtype)               # (P, C, H)
        blocks = [stage.blocks[i] for i in range(state.partition, model.num_blocks)]
        deepstack = state.deepstack.to(place.suffix_device) if state.deepstack is not None else None
        mask = chunk_mask(frame.attention_mask(), start, end)                           # (P, 1, C, end)
        hidden = run_blocks_chunk(model.decoder, blocks, hidden, state.position_ids.to(place.suffix_device), mask,
                                  frame.kv, state.partition, deepstack)
        hidden = stage.norm(hidden)
        frame.next_index, frame.next_start = state.chunk_index + 1, end
        frame.suffix_ms += (time.perf_counter() - t0) * 1e3
        if reads_sequence(stage.head):
            frame.rows.append(hidden)                       # a head reading the whole sequence gets every chunk's
        if not state.last_chunk:
            return hidden, None
        self.open = None
        rows, first = (torch.cat(frame.rows, dim=1), 0) if frame.rows else (hidden, start)   # (P, S or C, H)
        return hidden, stage.trajectory(rows, state.query_index % stage.seq_len - first, state, frame.suffix_ms)

    # ---- checks ----------------------------------------------------------------------------------------------
    def _admit(self, state: BoundaryState) -> OpenFrame:
        """Check the chunk; a first chunk opens its frame (one left unfinished is abandoned), a later one must be
        the next of the open frame. Raises InputError / ChunkOrderError with the reason."""
        where = f"boundary chunk {state.chunk_index}/{state.chunk_count} of frame {state.seq}"
        try:
            self.validate(state, where)
        except InputError:
            if self._belongs(state):
                self.abandon()                      # its frame cannot complete any more
            raise
        if state.chunk_index == 0:
            self.abandon()
            self.open = OpenFrame(state.seq, state.stamp_ns, state.partition, state.chunk_count,
                                  FrameKV(self.stage.seq_len), [])
            return self.open
        frame = self.open
        if frame is None or not self._belongs(state):
            raise ChunkOrderError(f"{where}: not the frame being assembled "
                                  f"({'none' if frame is None else f'frame {frame.seq}, chunk {frame.next_index} next'})"
                                  f"; refused (its first chunk was lost or refused)")
        if (state.chunk_index, state.chunk_start, state.chunk_count, state.partition) != \
                (frame.next_index, frame.next_start, frame.count, frame.partition):
            self.abandon()
            raise ChunkOrderError(f"{where}: expected chunk {frame.next_index}/{frame.count} from token "
                                  f"{frame.next_start} at partition {frame.partition}, got chunk {state.chunk_index}/"
                                  f"{state.chunk_count} from token {state.chunk_start} at partition {state.partition}; "
                                  f"frame {frame.seq} dropped whole")
        return frame

    def _belongs(self, state: BoundaryState) -> bool:
        return self.open is not None and (self.open.seq, self.open.stamp_ns) == (state.seq, state.stamp_ns)

    def validate(self, state: BoundaryState, where: str) -> None:
        stage, model = self.stage, self.stage.model
        seq_len, passes = stage.seq_len, model.num_passes
        lo, hi = stage.zone
        expect(isinstance(state.partition, int) and lo <= state.partition <= hi, InputError,
               f"{where}: computed at partition {state.partition}, this suffix runs from block {lo}..{hi}")
        expect(2 <= state.chunk_count <= 64 and 0 <= state.chunk_index < state.chunk_count, ChunkOrderError,
               f"{where}: chunk index/count out of range (count 2..64, index below it)")
        expect((state.chunk_index == 0) == (state.chunk_start == 0), ChunkOrderError,
               f"{where}: starts at token {state.chunk_start}; chunk 0, and only it, starts at token 0")
        hidden = state.hidden
        width = hidden.shape[1] if hidden.dim() == 3 else -1
        expect(hidden.dim() == 3 and hidden.shape[0] == passes and hidden.shape[2] == model.spec.hidden_size
               and width >= 1 and 0 <= state.chunk_start and state.chunk_start + width <= seq_len, InputError,
               f"{where}: hidden shape {tuple(hidden.shape)} from token {state.chunk_start}, expected ({passes}, C, "
               f"{model.spec.hidden_size}) inside the frame's {seq_len} tokens")
        check_boundary_dtype(hidden.dtype, stage.boundary_dtype, f"{where}: hidden")
        pos_shape = model.family.position_ids_shape(width)[:-2] + (passes, width)
        expect(tuple(state.position_ids.shape) == pos_shape, InputError,
               f"{where}: position_ids shape {tuple(state.position_ids.shape)}, expected {pos_shape}")
        expect(tuple(state.attention_mask.shape) == (passes, width), InputError,
               f"{where}: attention_mask shape {tuple(state.attention_mask.shape)}, expected {(passes, width)}")
        if state.last_chunk:
            end, q = state.chunk_start + width, model.query_tokens
            expect(end == seq_len, InputError, f"{where}: the last chunk ends at token {end}, the frame has {seq_len}")
            expect(state.query_index % seq_len - q + 1 >= state.chunk_start, InputError,
                   f"{where}: the head's {q} query token(s) ending at {state.query_index % seq_len} are not all "
                   f"in the last chunk (from token {state.chunk_start})")
        expect_finite(hidden, "nonfinite_boundary", f"{where}: hidden")
        self._validate_deepstack(state, width, where)

    def _validate_deepstack(self, state: BoundaryState, width: int, where: str) -> None:
        due = max(0, self.stage.deepstack_depth - state.partition)
        ds = state.deepstack
        expect((ds is None) == (due == 0), InputError,
               f"{where}: {'no' if ds is None else 'a'} DeepStack payload at partition {state.partition}; {due} due")
        if ds is None:
            return
        n = ds.positions.shape[0] if ds.positions.dim() == 1 else -1
        expect(ds.first_block == state.partition and n >= 0 and
               tuple(ds.features.shape) == (due, n, self.stage.model.spec.hidden_size), InputError,
               f"{where}: DeepStack features {tuple(ds.features.shape)} from block {ds.first_block}, expected "
               f"({due}, {n}, H) from block {state.partition}")
        expect(ds.positions.dtype == torch.int64 and bool(((ds.positions >= 0) & (ds.positions < width)).all())
               and ds.features.dtype == state.hidden.dtype, InputError,
               f"{where}: DeepStack positions must be int64 chunk indices in [0, {width}), features in the hidden dtype")
        expect_finite(ds.features, "nonfinite_boundary", f"{where}: DeepStack features")
