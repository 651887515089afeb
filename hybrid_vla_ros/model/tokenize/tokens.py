"""The token layout of one frame, and a byte-level tokenizer (offline, no vocabulary file).

    [BOS] ([VISION_START] [IMAGE] * n [VISION_END]) * cameras  text(instruction) [SLOT] * m text(ego)  [PLAN] * q

(m slot tokens for a model with numeric prompt slots, model/prompt_embeddings.py; 0 for every other)

The instruction is padded/truncated to a fixed byte count and the ego state is printed in a fixed-width
format, so every frame of a model has the same sequence length. The action head reads the final hidden
states at the last q positions, the [PLAN] query tokens (q = 1 but for heads reading several).
"""

from __future__ import annotations

import torch

PAD, BOS, IMAGE_TOKEN, VISION_START, VISION_END, PLAN, VIDEO_TOKEN, SLOT = 0, 1, 2, 3, 4, 5, 6, 7
BYTE_OFFSET = 8  # byte b -> token BYTE_OFFSET + b
MIN_VOCAB = BYTE_OFFSET + 256
EGO_FORMAT = "v{:+07.2f}w{:+06.3f}"  # speed m/s, yaw rate rad/s: always 16 bytes
EGO_BYTES = 16
DELAY_FORMAT = "d{:05.3f}"   # a delay-aware model's instruction: the expected delay in seconds, 6 bytes
MAX_DELAY_S = 5.0


def delay_text(delay_s: float) -> str:
    return DELAY_FORMAT.format(min(max(delay_s, 0.0), MAX_DELAY_S))


def byte_tokens(text: str, length: int) -> list[int]:
    data = text.encode("utf-8")[:length].ljust(length, b" ")
    return [BYTE_OFFSET + b for b in data]


def ego_text(speed_mps: float, yaw_rate_rps: float) -> str:
    speed = max(-999.99, min(9999.99, speed_mps))
    yaw = max(-9.999, min(99.999, yaw_rate_rps))
    return EGO_FORMAT.format(speed, yaw)[:EGO_BYTES].ljust(EGO_BYTES)


def build_prompt(num_cameras: int, image_tokens: int, instruction: str, text_tokens: int,
                 speed_mps: float, yaw_rate_rps: float, query_tokens: int = 1,
                 slots: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns input_ids (1, S) and mm_token_type_ids (1, S) (1 on image tokens, 0 elsewhere). Several query
    tokens are [PLAN] repeated (a checkpoint's own tokenizer names distinct ones)."""
    ids = [BOS]
    for _ in range(num_cameras):
        ids += [VISION_START] + [IMAGE_TOKEN] * image_tokens + [VISION_END]
    ids += byte_tokens(instruction, text_tokens) + [SLOT] * slots
    ids += byte_tokens(ego_text(speed_mps, yaw_rate_rps), EGO_BYTES)
    ids += [PLAN] * query_tokens
    input_ids = torch.tensor([ids], dtype=torch.long)
    return input_ids, (input_ids == IMAGE_TOKEN).to(torch.int32)


def sequence_length(num_cameras: int, image_tokens: int, text_tokens: int, query_tokens: int = 1,
                    slots: int = 0) -> int:
    return 1 + num_cameras * (image_tokens + 2) + text_tokens + slots + EGO_BYTES + query_tokens
