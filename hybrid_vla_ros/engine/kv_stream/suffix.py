"""The suffix side of streaming KV (engine/kv_stream/layout.py): blocks [p, L) over a window's new tokens, the slots
it kept (by the prefix's serial) read from its store. A slot the prefix kept that this suffix does not hold (a state
lost on the way, a suffix started later, a cut moved) is computed here from the boundary rows the state carries
(counted in `recomputed_slots`): nothing is refused for it."""

from __future__ import annotations

import time

import torch

from ...errors import InputError, expect
from ...types import BoundaryState, Trajectory
from .prefix import check_streamable
from .store import SegmentStore
from .window import run_window, segment_of


class StreamingSuffix:
    def __init__(self, stage):
        spec = stage.model.spec
        self.stage, self.spans = stage, check_streamable(stage.model, "suffix")
        self.store = SegmentStore(spec.image_slots * max(2, spec.frame_stride))
        self.windows = self.kept_slots = self.computed_slots = self.recomputed_slots = 0

    def validate(self, state: BoundaryState) -> torch.Tensor:
        """-> the state's kv_segments (2, slots): serials > 0, kept flags 0/1."""
        segments, slots = state.kv_segments, len(self.spans)
        where = f"boundary state of frame {state.seq}: kv_segments"
        expect(isinstance(segments, torch.Tensor) and segments.dtype == torch.int64 and
               tuple(segments.shape) == (2, slots), InputError,
               f"{where}: expected int64 (2, {slots}) (serial and kept flag per image slot), got "
               f"{getattr(segments, 'dtype', type(segments).__name__)} {tuple(getattr(segments, 'shape', ()))}")
        expect(bool((segments[0] > 0).all()) and bool(((segments[1] == 0) | (segments[1] == 1)).all()), InputError,
               f"{where}: serials must be > 0 and kept flags 0 or 1, got {segments.tolist()}")
        return segments

    @torch.inference_mode()
    def forward(self, state: BoundaryState) -> tuple[torch.Tensor, Trajectory]:
        """-> (the new tokens' final normed rows (1, n_new, H), trajectory)."""
        stage, model = self.stage, self.stage.model
        stage.validate(state)
        serials, kept = self.validate(state).tolist()
        t0 = time.perf_counter()
        place = stage.placement
        hidden = state.hidden.to(place.suffix_device, place.suffix_dtype)              # (1, S, H)
        position_ids = state.position_ids.to(place.suffix_device)
        self.store.use_partition(state.partition)
        segments = [self.held(serial, span) if flag else None
                    for serial, flag, span in zip(serials, kept, self.spans)]
        blocks = [(i, stage.blocks[i]) for i in range(state.partition, model.num_blocks)]
        result = run_window(model.decoder, blocks, hidden, position_ids, self.spans, segments)
        rows = stage.norm(result.hidden)                                               # (1, n_new, H)
        query = state.query_index % hidden.shape[1]
        last = int(torch.searchsorted(result.new_index, query))
        expect(last < len(result.new_index) and int(result.new_index[last]) == query, InputError,
               f"boundary state of frame {state.seq}: query token {query} lies inside a kept image slot")
        trajectory = stage.trajectory(rows, last, state, (time.perf_counter() - t0) * 1e3)   # raises unless finite:
        for span, serial, segment in zip(self.spans, serials, segments):                  # a bad window keeps nothing
            if segment is None:
                self.store.put(serial, segment_of(result, span, position_ids, serial))
        self.count(kept, segments)
        return rows, trajectory

    def held(self, serial: int, span: tuple[int, int]):
        """The kept segment of that serial, if held and of the slot's length (else it is computed here)."""
        segment = self.store.get(serial)
        return segment if segment is not None and segment.positions.shape[-1] == span[1] - span[0] else None

    def count(self, kept: list[int], segments: list) -> None:
        self.windows += 1
        held = sum(s is not None for s in segments)
        self.kept_slots += held
        self.computed_slots += len(segments) - held
        self.recomputed_slots += sum(flag for flag, s in zip(kept, segments) if s is None)

    def stats(self) -> dict:
        return {"windows": self.windows, "kept_slots": self.kept_slots, "computed_slots": self.computed_slots,
                "recomputed_slots": self.recomputed_slots, "rebuilds": self.store.rebuilds}
