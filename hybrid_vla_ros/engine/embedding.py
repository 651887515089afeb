"""One frame -> what block 0 takes: token embeddings with the image (or scene) features in place, position ids,
and DeepStack's additions; on the prefix device. Both the whole-frame and the chunked prefix start here."""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..model.inputs import encode_frame
from ..model.vla import VLAModel
from ..types import DeepStack, Frame
from .placement import Placement


class Embedded(NamedTuple):
    """One frame, ready for block 0, on the prefix device (P = the model's passes, 1 but for several-pass models)."""
    embeds: torch.Tensor              # (P, S, H) token embeddings with the image features in place
    position_ids: torch.Tensor        # (3, P, S) M-RoPE or (P, S)
    input_ids: torch.Tensor           # (P, S)
    deepstack: DeepStack | None       # Qwen3-VL: additions after blocks 0 .. k-1 at the image tokens


def frame_embeddings(model: VLAModel, frame: Frame, place: Placement = Placement(), vision=None) -> Embedded:
    """Frame -> what block 0 takes (and what DeepStack adds after the first blocks), on the prefix device. vision:
    a VisionCache (expert_split/vision_cache.py) over the frames of one prefix: a keyed image met again is not
    encoded again where that is exact (frame.image_keys; a family whose images are encoded one by one)."""
    encoded = encode_frame(frame, model, place.prefix_device)  # images resized/normalised on the prefix device
    input_ids = place.to_prefix(encoded.input_ids)                                     # (1, S)
    pixels = {k: place.to_prefix(v) for k, v in encoded.pixels.items()}
    if "pixel_values" in pixels:
        pixels["pixel_values"] = pixels["pixel_values"].to(place.prefix_dtype)
    embeds = model.embed_prompt(input_ids, frame.context)                              # (P, S, H)
    if vision is not None and encodes_images_alone(model, frame, pixels):
        features, additions = vision.encode_images(list(frame.image_keys), pixel_shape(pixels),
                                                   lambda index: images_through_tower(model, pixels, index))
    else:
        features, additions = model.family.frame_features(model, pixels, encoded.ego, frame.stamp_ns,
                                                          frame.context)               # (n_img, H), k x
    image_mask = input_ids == model.prompt.image_token_id                              # (1, S)
    if input_ids.shape[0] > 1:                                                         # the same for every pass
        features = features.repeat(input_ids.shape[0], 1)
    embeds = embeds.masked_scatter(image_mask.unsqueeze(-1), features.to(embeds.dtype))
    position_ids = model.family.position_ids(model.backbone, input_ids, place.to_prefix(encoded.mm_token_type_ids),
                                             pixels)                                   # (3, 1, S) or (1, S)
    return Embedded(embeds, position_ids, input_ids, model.family.deepstack(image_mask, additions))


def encodes_images_alone(model: VLAModel, frame: Frame, pixels: dict) -> bool:
    """Whether the frame's images can be encoded one by one: keyed, and a vision tower (not a scene encoder, which
    fuses them) whose pixels split evenly by image."""
    return (frame.image_keys is not None and len(frame.image_keys) == model.spec.image_slots
            and not model.family.scene_encoded and model.family.camera_pixels(model.spec, pixels, 0) is not None)


def pixel_shape(pixels: dict) -> tuple:
    return tuple((name, tuple(t.shape)) for name, t in sorted(pixels.items()))


def images_through_tower(model: VLAModel, pixels: dict, index) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The images at `index` (prompt order) through the vision tower in one call -> per image (rows (n, H),
    DeepStack rows (k, n, H))."""
    family, spec, index = model.family, model.spec, list(index)
    parts = [family.camera_pixels(spec, pixels, i) for i in index]
    chosen = {name: torch.cat([p[name] for p in parts]) for name in pixels}
    features, additions = family.image_features_and_deepstack(model.backbone, chosen)  # (len(index) n, H), k x
    n = features.shape[0] // len(index)
    out = []
    for j in range(len(index)):
        rows = features[j * n:(j + 1) * n]
        stack = torch.stack([a[j * n:(j + 1) * n] for a in additions]) if additions else \
            rows.new_zeros((0,) + tuple(rows.shape))
        out.append((rows, stack))
    return out


class FrameEmbedder:
    """A frame's block-0 inputs built as chunked prefill needs them: token embeddings and position ids at once
    (cheap), the image features camera by camera when the first chunk that holds a camera's tokens is next, so
    that the suffix starts on camera 0's tokens while the prefix still encodes later cameras. A family that
    cannot encode one camera alone (a scene encoder fuses them) encodes the whole frame at the first chunk."""

    def __init__(self, model: VLAModel, frame: Frame, place: Placement = Placement()):
        self.model, self.frame = model, frame
        encoded = encode_frame(frame, model, place.prefix_device)
        self.ego = encoded.ego
        self.input_ids = place.to_prefix(encoded.input_ids)                            # (P, S)
        self.pixels = {k: place.to_prefix(v) for k, v in encoded.pixels.items()}
        if "pixel_values" in self.pixels:
            self.pixels["pixel_values"] = self.pixels["pixel_values"].to(place.prefix_dtype)
        self.embeds = model.embed_prompt(self.input_ids, frame.context)               # (P, S, H)
        self.position_ids = model.family.position_ids(model.backbone, self.input_ids,
                                                      place.to_prefix(encoded.mm_token_type_ids), self.pixels)
        image_mask = self.input_ids[0] == model.prompt.image_token_id                  # (S,)
        self.positions = image_mask.nonzero().squeeze(-1)                               # (n_img,) ascending
        cameras = model.spec.image_slots
        self.per_camera = (model.family.camera_pixels(model.spec, self.pixels, 0) is not None
                           and self.positions.numel() % cameras == 0)
        self.groups = list(self.positions.chunk(cameras)) if self.per_camera else [self.positions]  # tokens of each
        self.additions: list[torch.Tensor | None] = [None] * len(self.groups)           # (k, n_group, H) each
        self.encoded = 0                                                                 # groups encoded so far

    def ready(self, end: int) -> torch.Tensor:
        """Encode every camera (group) whose first image token lies before `end` -> the embeddings (P, S, H),
        complete up to `end`."""
        while self.encoded < len(self.groups) and int(self.groups[self.encoded][0]) < end:
            self._encode(self.encoded)
            self.encoded += 1
        return self.embeds

    def _encode(self, group: int) -> None:
        model = self.model
        pixels = model.family.camera_pixels(model.spec, self.pixels, group) if self.per_camera else self.pixels
        features, additions = model.family.frame_features(model, pixels, self.ego, self.frame.stamp_ns,
                                                          self.frame.context)          # (n, H)
        positions = self.groups[group]
        self.embeds[:, positions] = features.to(self.embeds.dtype)                      # every pass the same
        self.additions[group] = torch.stack(additions) if additions else None          # (k, n, H)

    def deepstack(self, start: int, end: int) -> DeepStack | None:
        """DeepStack's additions at the image tokens inside [start, end) (chunk-relative positions; an empty one
        for a chunk without image tokens), None for a family without DeepStack. Call after ready(end)."""
        done = [(g, a) for g, a in zip(self.groups, self.additions) if a is not None]
        if not done and self.model.family.deepstack_blocks(self.model.backbone.config) == 0:
            return None
        if not done:   # DeepStack family, no camera encoded yet: a chunk of text only
            k, hidden = self.model.family.deepstack_blocks(self.model.backbone.config), self.embeds.shape[-1]
            return DeepStack(self.positions[:0] - start, self.embeds.new_empty(k, 0, hidden), 0)
        positions = torch.cat([g for g, _ in done])
        features = torch.cat([a for _, a in done], dim=1)                               # (k, n_done, H)
        inside = (positions >= start) & (positions < end)
        return DeepStack(positions[inside] - start, features[:, inside], 0)
