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


def frame_embeddings(model: VLAModel, frame: Frame, place: Placement = Placement()) -> Embedded:
    """Frame -> what block 0 takes (and what DeepStack adds after the first blocks), on the prefix device."""
    encoded = encode_frame(frame, model, place.prefix_device)  # images resized/normalised on the prefix device
    input_ids = place.to_prefix(encoded.input_ids)                                     # (1, S)
    pixels = {k: place.to_prefix(v) for k, v in encoded.pixels.items()}
    if "pixel_values" in pixels:
        pixels["pixel_values"] = pixels["pixel_values"].to(place.prefix_dtype)
    embeds = model.decoder.embed_tokens(input_ids)                                     # (1, S, H)
    features, additions = model.family.frame_features(model, pixels, encoded.ego, frame.stamp_ns)  # (n_img, H), k x
    image_mask = input_ids == model.prompt.image_token_id                              # (1, S)
    if input_ids.shape[0] > 1:                                                         # the same for every pass
        features = features.repeat(input_ids.shape[0], 1)
    embeds = embeds.masked_scatter(image_mask.unsqueeze(-1), features.to(embeds.dtype))
    position_ids = model.family.position_ids(model.backbone, input_ids, place.to_prefix(encoded.mm_token_type_ids),
                                             pixels)                                   # (3, 1, S) or (1, S)
    return Embedded(embeds, position_ids, input_ids, model.family.deepstack(image_mask, additions))
