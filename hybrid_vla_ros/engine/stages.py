"""Block partitioning: the prefix stage (vision + embeddings + blocks [0, p)) and the suffix stage
(blocks [p, L) + final norm + action head). Only a BoundaryState crosses between them."""

from __future__ import annotations

import copy
import time
import torch
from transformers.masking_utils import create_causal_mask

from ..errors import ConfigError, InputError, expect, expect_finite
from ..model.checkpoint import ensure_loaded
from ..model.inputs import encode_frame
from ..model.vla import VLAModel, waypoints_from_head
from .scheduling.partition import Zone, check_partition, partition_report, prefix_modules, suffix_modules  # noqa: F401
from .chunked_stages import ChunkedSuffix, prefix_chunks
from .embedding import Embedded, frame_embeddings  # noqa: F401 (re-exported)
from .expert_split.vision_cache import VisionCache
from .int8_calibration import int8_block
from .kv_stream.prefix import StreamingPrefix
from .kv_stream.suffix import StreamingSuffix
from .placement import Placement, check_boundary_dtype
from ..types import BoundaryState, DeepStack, Frame, Trajectory  # noqa: F401


def run_blocks(decoder, blocks, hidden: torch.Tensor, position_ids: torch.Tensor,
               attention_mask: torch.Tensor, first: int = 0, deepstack: DeepStack | None = None) -> torch.Tensor:
    """Run decoder blocks first, first + 1, ... (the given ones) on hidden (B, S, H), adding DeepStack's
    features after the blocks it names. Mask and rotary cos/sin are rebuilt from the 2-D mask and the position
    ids, so either side of the cut can call this with the same inputs."""
    if len(blocks) == 0:
        return hidden
    mask = create_causal_mask(config=decoder.config, inputs_embeds=hidden, attention_mask=attention_mask,
                              cache=None, position_ids=None)
    position_embeddings = decoder.rotary_emb(hidden, position_ids)  # cos, sin: (B, S, head_dim)
    for index, block in enumerate(blocks, start=first):
        hidden = block(hidden, attention_mask=mask, position_embeddings=position_embeddings, position_ids=None)
        if deepstack is not None:
            hidden = deepstack.after_block(index, hidden)
    return hidden


def is_placed(module: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> bool:
    """Every floating-point weight of `module` already on `device` in `dtype` (nothing to convert)."""
    return all(t.device == device and (t.dtype == dtype or not t.is_floating_point())
               for t in list(module.parameters()) + list(module.buffers()))


def needs_placing(module: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> bool:
    """A module with weights not yet on `device` in `dtype`. One without parameters (the decoder's rotary
    tables) needs none: HF's text rotary moves its table to the input's device, in fp32, at every call. (It
    used to fail is_placed on a checkpoint's prefix, and the whole prefix was copied: its weights twice.)"""
    return any(True for _ in module.parameters()) and not is_placed(module, device, dtype)


def placed(module: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    """`module` itself when already placed, else a converted copy: the model given to a stage (possibly the
    process-wide one other stages share) is never mutated."""
    if is_placed(module, device, dtype):
        return module
    return copy.deepcopy(module).to(device=device, dtype=dtype)


def copy_sharing(model: VLAModel, shared: list[torch.nn.Module]) -> VLAModel:
    """A deep copy of `model` in which the `shared` modules stay the very same objects (not duplicated)."""
    return copy.deepcopy(model, memo={id(m): m for m in shared})


class PrefixStage:
    """Vision encoder + embeddings + blocks [0, p) on the prefix device. When the prefix device or dtype
    differs from the model's, the stage works on its own placed copy of the prefix parts (the model it was
    given is never mutated; the suffix-only parts stay shared, not copied)."""

    def __init__(self, model: VLAModel, partition: int, placement: Placement = Placement(),
                 zone: tuple[int, int] | None = None, encode_once: bool = True, kv_stream: bool = False,
                 kv_refresh_windows: int = 0):
        self.placement = placement
        self.partition = check_partition(partition, model.num_blocks, "prefix partition")
        self.zone = Zone.around(self.partition, model.num_blocks, zone)
        hi = self.zone[1]
        device, dtype = placement.prefix_device, placement.prefix_dtype
        placement.exact_fp32()
        ensure_loaded(model, prefix_modules(model, hi), dtype, device)  # a checkpoint's prefix side: read now
        if any(needs_placing(m, device, dtype) for m in prefix_modules(model, hi)):
            model = copy_sharing(model, suffix_modules(model, hi))
            for module in prefix_modules(model, hi):  # blocks [0, zone end) resident here
                module.to(device=device, dtype=dtype)
        self.model = model
        self.blocks = list(model.decoder.layers[:hi])
        # a model reading its history: each image encoded once across its windows, where exact (VisionCache probes)
        self.vision = VisionCache(windows=max(2, model.spec.frame_stride)) \
            if model.spec.frames_per_camera > 1 and encode_once else None
        # opt-in, approximate: past frames' KV for blocks [0, p) kept across windows (engine/kv_stream/)
        self.stream = StreamingPrefix(model, kv_refresh_windows) if kv_stream else None

    def set_partition(self, partition: int) -> None:
        """Move the cut inside the dynamic zone: an index change, never a weight copy."""
        self.zone.check(partition, self.model.num_blocks, "prefix partition")
        self.partition = partition

    def forget(self) -> None:
        """Drop every kept image encoding and KV segment (a new drive whose image keys may repeat another's)."""
        if self.vision is not None:
            self.vision.clear()
        if self.stream is not None:
            self.stream.store.clear()

    def run_chunks(self, frame: Frame, chunks=1):
        """The frame's boundary states chunk by chunk (engine/chunked_stages.py); chunks=1: the one whole state."""
        if chunks == 1:
            return iter([self.run(frame)])
        expect(self.stream is None, ConfigError, "chunked prefill and streaming KV: one or the other (a chunk would "
                                                 "need the kept segments inside its own tokens)")
        return prefix_chunks(self, frame, chunks)

    @torch.inference_mode()
    def run(self, frame: Frame) -> BoundaryState:
        if self.stream is not None:
            return self.stream.run(self, frame, self.partition)
        t0 = time.perf_counter()
        model, place = self.model, self.placement
        embeds, position_ids, input_ids, deepstack = frame_embeddings(model, frame, place, self.vision)
        attention_mask = torch.ones_like(input_ids)                                    # (1, S)
        partition = self.partition  # read once: a concurrent set_partition applies from the next frame
        hidden = run_blocks(model.decoder, self.blocks[:partition], embeds, position_ids, attention_mask, 0, deepstack)
        place.synchronize()
        return BoundaryState(hidden=hidden, position_ids=position_ids, attention_mask=attention_mask,
                             deepstack=deepstack.from_block(partition) if deepstack is not None else None,
                             partition=partition, seq=frame.seq, stamp_ns=frame.stamp_ns,
                             query_index=input_ids.shape[1] - 1, arrival_ns=frame.arrival_ns, context=frame.context,
                             timings={"prefix_ms": (time.perf_counter() - t0) * 1e3})


class SuffixStage:
    """Blocks [p, L) + final norm + action head on the CPU, in the suffix dtype. Boundary states come in the
    placement's prefix dtype, or with any_boundary_dtype (boundary_dtype: auto) in any dtype a prefix computes
    in; either is converted to the suffix dtype."""

    def __init__(self, model: VLAModel, partition: int, placement: Placement = Placement(),
                 zone: tuple[int, int] | None = None, any_boundary_dtype: bool = False):
        expect(model.spec.action_head == "waypoints", ConfigError,
               f"model '{model.spec.name}' decodes action tokens: it runs through the ActionFlow engine "
               f"(engine/actionflow/packing.py; in the graph engine/actionflow/prefix_server.py and packed_suffix.py), not this stage")
        self.model, self.placement = model, placement
        self.boundary_dtype = None if any_boundary_dtype else placement.prefix_dtype  # None: what the prefix sends
        self.partition = check_partition(partition, model.num_blocks, "suffix partition")
        self.zone = lo, hi = Zone.around(self.partition, model.num_blocks, zone)
        layers = model.decoder.layers
        device, dtype = placement.suffix_device, placement.suffix_dtype
        ensure_loaded(model, suffix_modules(model, lo), dtype, device)  # a checkpoint's suffix side: read now
        # Zone blocks [lo, hi) are resident on both sides. Placed apart, the two sides never share a block: a
        # block placed for the suffix is not placed for the prefix (which converts its own copy), and vice
        # versa (placed() converts a copy here). On one device in one dtype they are shared.
        self.blocks = {i: placed(layers[i], device, dtype) for i in range(lo, model.num_blocks)}
        if placement.suffix_int8:   # its own int8 copies (engine/int8.py), smoothed where calibrated
            self.blocks = {i: int8_block(model, i, block) for i, block in self.blocks.items()}
        self.norm, self.head = placed(model.decoder.norm, device, dtype), placed(model.action_head, device, dtype)
        self.image_tokens, self.seq_len = model.image_tokens, model.sequence_length
        self.deepstack_depth = model.family.deepstack_blocks(model.backbone.config)
        self.chunks = ChunkedSuffix(self)   # a chunked frame's states (chunk_count > 1) go there
        self.stream = None                  # streaming KV's side (engine/kv_stream/), made at the first such state

    def set_partition(self, partition: int) -> None:
        """The partition the suffix expects by default; each state still runs from its own partition."""
        self.zone.check(partition, self.model.num_blocks, "suffix partition")
        self.partition = partition

    def forget(self) -> None:
        """Drop every kept KV segment (engine/kv_stream/)."""
        if self.stream is not None:
            self.stream.store.clear()

    def rematerialise(self) -> None:
        """Copy the suffix's own block weights anew from the calling thread, so that after a NUMA memory
        binding their pages live on the bound node."""
        layers = self.model.decoder.layers
        for i, block in self.blocks.items():
            if i >= self.zone[1] or block is not layers[i]:  # values unchanged: only where the pages live
                for param in block.parameters():
                    param.data = param.data.clone()
                for module in block.modules():   # an int8 block: its int8 weights and oneDNN's packed copy
                    if hasattr(module, "repack"):
                        module.repack()

    def expected_hidden_shape(self) -> tuple[int, int, int]:
        return (self.model.num_passes, self.seq_len, self.model.spec.hidden_size)

    def validate(self, state: BoundaryState) -> None:
        where = f"boundary state of frame {state.seq}"
        lo, hi = self.zone
        expect(isinstance(state.partition, int) and lo <= state.partition <= hi, InputError,
               f"{where}: computed at partition {state.partition}, this suffix runs from block "
               f"{lo if lo == hi else f'{lo}..{hi}'} (dynamic zone [{lo}, {hi}])")
        expect(tuple(state.hidden.shape) == self.expected_hidden_shape(), InputError,
               f"{where}: hidden shape {tuple(state.hidden.shape)}, expected {self.expected_hidden_shape()} "
               f"(batch, tokens, hidden of model '{self.model.spec.name}')")
        check_boundary_dtype(state.hidden.dtype, self.boundary_dtype, f"{where}: hidden")
        passes = self.model.num_passes
        pos_shape = self.model.family.position_ids_shape(self.seq_len)
        pos_shape = pos_shape[:-2] + (passes, self.seq_len)                            # (P, S) or (3, P, S)
        expect(tuple(state.position_ids.shape) == pos_shape, InputError,
               f"{where}: position_ids shape {tuple(state.position_ids.shape)}, expected {pos_shape}")
        expect(tuple(state.attention_mask.shape) == (passes, self.seq_len), InputError,
               f"{where}: attention_mask shape {tuple(state.attention_mask.shape)}, expected {(passes, self.seq_len)}")
        q = self.model.query_tokens
        expect(-self.seq_len <= state.query_index < self.seq_len and state.query_index % self.seq_len >= q - 1,
               InputError, f"{where}: query_index {state.query_index}: the head's {q} query token(s) must end there, "
                           f"inside the {self.seq_len} tokens")
        expect_finite(state.hidden, "nonfinite_boundary", f"{where}: hidden")  # an fp16 overflow, a damaged payload
        self.validate_deepstack(state, where)

    def validate_deepstack(self, state: BoundaryState, where: str) -> None:
        """A cut below the DeepStack depth k carries the k - p additions still due, at the image tokens."""
        due = max(0, self.deepstack_depth - state.partition)
        ds = state.deepstack
        expect((ds is None) == (due == 0), InputError,
               f"{where}: {'no' if ds is None else 'a'} DeepStack payload at partition {state.partition}; this "
               f"model adds DeepStack features after blocks 0..{self.deepstack_depth - 1}, so {due} are due")
        if ds is None:
            return
        shape = (due, self.image_tokens, self.model.spec.hidden_size)
        expect(ds.first_block == state.partition and tuple(ds.features.shape) == shape, InputError,
               f"{where}: DeepStack features {tuple(ds.features.shape)} from block {ds.first_block}, expected {shape} "
               f"from block {state.partition}")
        expect(ds.features.dtype == state.hidden.dtype, InputError,
               f"{where}: DeepStack dtype {ds.features.dtype}, expected {state.hidden.dtype} (the hidden state's)")
        expect(ds.positions.dtype == torch.int64 and tuple(ds.positions.shape) == (self.image_tokens,) and
               bool(((ds.positions >= 0) & (ds.positions < self.seq_len)).all()), InputError,
               f"{where}: DeepStack positions: expected {self.image_tokens} int64 token indices in [0, {self.seq_len})")
        expect_finite(ds.features, "nonfinite_boundary", f"{where}: DeepStack features")

    def run(self, state: BoundaryState) -> Trajectory | None:
        """-> the trajectory; None for a chunk of a chunked frame but its last."""
        return self.forward(state)[1]

    @torch.inference_mode()
    def forward(self, state: BoundaryState) -> tuple[torch.Tensor, Trajectory | None]:
        """-> (final normed hidden state (P, S, H), trajectory); a chunk: its own rows (P, C, H) and the
        trajectory on the frame's last chunk."""
        if state.chunk_count != 1:
            return self.chunks.forward(state)
        self.chunks.abandon()   # a whole frame after a chunked one left unfinished: that one cannot complete
        if state.kv_segments is not None:   # the new tokens' rows (1, n_new, H) then, not the whole frame's
            if self.stream is None:
                try:
                    self.stream = StreamingSuffix(self)
                except ConfigError as exc:   # a state claiming kept segments for a model that cannot keep any
                    raise InputError(f"boundary state of frame {state.seq} carries kv_segments: {exc}") from exc
            return self.stream.forward(state)
        self.validate(state)
        t0 = time.perf_counter()
        model, place = self.model, self.placement
        hidden = state.hidden.to(place.suffix_device, place.suffix_dtype)               # (1, S, H)
        position_ids = state.position_ids.to(place.suffix_device)
        attention_mask = state.attention_mask.to(place.suffix_device)
        blocks = [self.blocks[i] for i in range(state.partition, model.num_blocks)]  # exactly what the prefix skipped
        deepstack = state.deepstack.to(place.suffix_device) if state.deepstack is not None else None
        hidden = run_blocks(model.decoder, blocks, hidden, position_ids, attention_mask, state.partition, deepstack)
        hidden = self.norm(hidden)                                                     # (1, S, H)
        return hidden, self.trajectory(hidden, state.query_index % self.seq_len, state,
                                       (time.perf_counter() - t0) * 1e3)

    def trajectory(self, rows: torch.Tensor, last: int, state: BoundaryState, suffix_ms: float) -> Trajectory:
        """The head on a frame's final normed rows (P, S', H), its query tokens ending at row `last` -> the frame's
        trajectory, checked finite (whole, chunked and streaming frames alike); records suffix_ms."""
        where = f"trajectory of frame {state.seq}"
        raw, extras = self.model.run_head(self.head, rows, last, state.context, state.stamp_ns, where)  # (1, N, 4)
        points = waypoints_from_head(raw.float(), self.model.spec.waypoint_dt_s)       # (1, N, 5)
        expect_finite(points, "nonfinite_output", where)
        state.timings["suffix_ms"] = suffix_ms
        return Trajectory(points=points[0].cpu().numpy(), seq=state.seq, stamp_ns=state.stamp_ns,
                          partition=state.partition, extras=extras)


@torch.inference_mode()
def reference_forward(model: VLAModel, frame: Frame) -> tuple[torch.Tensor, Trajectory]:
    """The unsplit model through HF's own forward (all passes as one batch): (final hidden state (P, S, H),
    trajectory)."""
    encoded = encode_frame(frame, model)
    with model.prompt_embeddings_applied(frame.context):   # HF embeds the ids itself: the rows written there
        inputs = model.family.reference_inputs(model, encoded, frame)   # ids + pixels, or a scene model's embeds
        out = model.backbone(attention_mask=torch.ones_like(encoded.input_ids), **inputs)
    hidden = out.last_hidden_state                                                     # (1, S, H), normed
    raw, extras = model.run_head(model.action_head, hidden, hidden.shape[1] - 1, frame.context, frame.stamp_ns,
                                 f"reference trajectory of frame {frame.seq}")         # (1, N, 4)
    points = waypoints_from_head(raw.float(), model.spec.waypoint_dt_s)
    return hidden, Trajectory(points=points[0].numpy(), seq=frame.seq, stamp_ns=frame.stamp_ns,
                              partition=model.num_blocks, extras=extras)
