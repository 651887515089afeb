"""The prefix side of streaming KV (engine/kv_stream/layout.py): a window's image slots whose segment this prefix
kept (by the image's key: camera, stamp, identity) are not computed again in blocks [0, p); every other token is.
The boundary state stays whole (P, S, H): a kept slot's rows are the ones kept with it, so the suffix can compute any
slot it did not keep itself. `kv_segments` (2, slots) tells it, per slot, the segment's serial and whether the prefix
kept it (1) or computed it now (0)."""

from __future__ import annotations

import itertools
import time

import torch

from ...errors import ConfigError, expect
from ...model.plugins.head_inputs import reads_sequence
from ...types import BoundaryState, Frame
from ..embedding import frame_embeddings
from .layout import check_attention, check_rotary, prompt_spans
from .store import SegmentStore
from .window import run_window, segment_of


def check_streamable(model, where: str) -> list[tuple[int, int]]:
    """Streaming KV serves a single-pass waypoint model reading its history, vision-tower family, no DeepStack.
    -> each image slot's token span in its prompt (a fixed layout)."""
    spec = model.spec
    expect(spec.action_head == "waypoints" and model.num_passes == 1 and not reads_sequence(model.action_head),
           ConfigError, f"{where}: streaming KV serves single-pass waypoint models whose head reads the query tokens "
                        f"('{spec.name}': head {spec.action_head}/{spec.head}, {model.num_passes} pass(es))")
    expect(spec.frames_per_camera > 1, ConfigError,
           f"{where}: model '{spec.name}' reads one frame a camera: no past frame's KV to keep")
    expect(not model.family.scene_encoded and model.family.deepstack_blocks(model.backbone.config) == 0, ConfigError,
           f"{where}: family {spec.family!r} (a scene encoder or DeepStack) is not served by streaming KV")
    check_rotary(model.decoder, where)
    check_attention(model.decoder.config, where)
    return prompt_spans(model)   # one run of image tokens per slot (a family whose image runs merge: refused)


class StreamingPrefix:
    """refresh_windows: every that many windows one computed whole (0: only when nothing is kept); it bounds how
    far back a kept frame's context reaches and how long a suffix that lost a state recomputes."""

    def __init__(self, model, refresh_windows: int = 0):
        self.spans = check_streamable(model, "prefix")
        expect(isinstance(refresh_windows, int) and refresh_windows >= 0, ConfigError,
               f"kv refresh windows {refresh_windows!r}: expected an integer >= 0 (0: never)")
        spec = model.spec
        self.model, self.refresh_windows = model, refresh_windows
        self.store = SegmentStore(spec.image_slots * max(2, spec.frame_stride))
        self.serials = itertools.count(time.time_ns())   # unique across restarts: a suffix never meets an old one
        self.windows = self.kept_slots = self.computed_slots = self.last_new_tokens = 0

    def refresh_due(self) -> bool:
        return self.refresh_windows > 0 and self.windows % self.refresh_windows == 0

    def run(self, stage, frame: Frame, partition: int) -> BoundaryState:
        t0 = time.perf_counter()
        model, place = self.model, stage.placement
        embeds, position_ids, input_ids, _ = frame_embeddings(model, frame, place, stage.vision)  # (1, S, H)
        spans = self.spans
        self.store.use_partition(partition)
        keys = frame.image_keys if frame.image_keys is not None and len(frame.image_keys) == len(spans) else None
        segments = [None] * len(spans) if keys is None or self.refresh_due() else [self.store.get(k) for k in keys]
        blocks = list(enumerate(stage.blocks[:partition]))
        result = run_window(model.decoder, blocks, embeds, position_ids, spans, segments)
        hidden = embeds.clone()                                                        # (1, S, H)
        hidden[:, result.new_index] = result.hidden
        keep = keys is not None and bool(torch.isfinite(result.hidden).all())   # an overflow is sent (the suffix
        serials = []                                                             # refuses it), never kept
        for slot, (span, segment) in enumerate(zip(spans, segments)):
            if segment is not None:
                hidden[:, span[0]:span[1]] = segment.rows
            else:
                segment = segment_of(result, span, position_ids, next(self.serials),
                                     hidden[:, span[0]:span[1]].clone())
                if keep:
                    self.store.put(keys[slot], segment)
            serials.append(segment.serial)
        self.last_new_tokens = int(result.new_index.numel())
        kept = [int(s is not None) for s in segments]
        self.windows += 1
        self.kept_slots, self.computed_slots = self.kept_slots + sum(kept), self.computed_slots + len(kept) - sum(kept)
        place.synchronize()
        return BoundaryState(hidden=hidden, position_ids=position_ids, attention_mask=torch.ones_like(input_ids),
                             partition=partition, seq=frame.seq, stamp_ns=frame.stamp_ns,
                             query_index=input_ids.shape[1] - 1, arrival_ns=frame.arrival_ns, context=frame.context,
                             kv_segments=torch.tensor([serials, kept], dtype=torch.int64),
                             timings={"prefix_ms": (time.perf_counter() - t0) * 1e3})

    def stats(self) -> dict:
        return {"windows": self.windows, "kept_slots": self.kept_slots, "computed_slots": self.computed_slots,
                "rebuilds": self.store.rebuilds, "refresh_windows": self.refresh_windows}
