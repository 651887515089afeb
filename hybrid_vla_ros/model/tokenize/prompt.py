"""The prompt of one frame, as token ids, for either tokenizer:

- `BytePrompt`: the presets' built-in byte-level tokenizer (model/tokenize/tokens.py), no files needed.
- `TokenizerPrompt`: a checkpoint's own tokenizer (tokenizer.json & co, loaded offline by transformers) with
  its family's image layout, the special-token ids from its config.json, and the planning query token named
  in the action head's metadata (`plan_token`).

Layout (both): [BOS] then per camera the family's image block (Qwen: <vision_start> <image_pad> x n
<vision_end>; LLaVA: <image> x n), the instruction padded/truncated to `text_tokens` tokens, the ego state
(fixed-width text) padded to EGO_BYTES tokens, then the planning query token, whose final hidden state the
action head reads. Every frame of a model has the same length, so the pipeline's buffers never change shape.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ...errors import ConfigError, expect
from .tokens import EGO_BYTES, IMAGE_TOKEN, SLOT, build_prompt, ego_text, sequence_length

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


class BytePrompt:
    image_token_id = IMAGE_TOKEN
    slot_token_id = SLOT

    def build(self, num_cameras: int, image_tokens: int, instruction: str, text_tokens: int,
              speed_mps: float, yaw_rate_rps: float, query_tokens: int = 1,
              slots: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        return build_prompt(num_cameras, image_tokens, instruction, text_tokens, speed_mps, yaw_rate_rps, query_tokens,
                            slots)

    def sequence_length(self, num_cameras: int, image_tokens: int, text_tokens: int, query_tokens: int = 1,
                        slots: int = 0) -> int:
        return sequence_length(num_cameras, image_tokens, text_tokens, query_tokens, slots)

    def describe(self) -> str:
        return "built-in byte-level tokenizer"

    def save(self, directory: Path) -> dict:
        """Write what a checkpoint needs to rebuild this prompt; -> the head metadata fields it adds."""
        return {}


class TokenizerPrompt:
    def __init__(self, tokenizer, family, config, plan_token: str | list[str], source: str,
                 slot_token: str | None = None):
        """family: the backbone's Family (model/families/), which says where its config keeps the image ids.
        plan_token: the head's query token, or the list of them for a head reading several (MindDrive: 2).
        slot_token: the token a numeric prompt slot's rows replace (SimLingo: <TARGET_POINT>), if the model has any."""
        self.tokenizer, self.source = tokenizer, source
        self.image_token_id, self.vision_start, self.vision_end = family.tokenizer_token_ids(config, tokenizer)
        self.plan_token = plan_token
        names = [plan_token] if isinstance(plan_token, str) else list(plan_token)
        expect(names and all(isinstance(n, str) for n in names), ConfigError,
               f"{source}: plan_token must name the head's query token(s): a string or a list of strings")
        self.query_ids = [self._token_id(n, "plan_token (the action head's query token)") for n in names]
        self.plan_id = self.query_ids[-1]
        self.slot_token = slot_token
        self.slot_token_id = self._token_id(slot_token, "slot_token (a prompt slot's token)") if slot_token else None
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        expect(self.pad_id is not None, ConfigError,
               f"{source}: the tokenizer has neither a pad nor an eos token to pad the instruction with")
        self.bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []

    def _token_id(self, token: str, what: str) -> int:
        ids = self.tokenizer.convert_tokens_to_ids([token])
        unk = self.tokenizer.unk_token_id
        expect(ids and ids[0] is not None and (unk is None or ids[0] != unk), ConfigError,
               f"{self.source}: {what} {token!r} is not a token of the checkpoint's tokenizer (add it as a special "
               f"token when fine-tuning, and name it in action_head.safetensors' metadata)")
        return int(ids[0])

    def _text(self, text: str, length: int) -> list[int]:
        ids = self.tokenizer.encode(text, add_special_tokens=False)[:length]
        return ids + [self.pad_id] * (length - len(ids))

    def _image_block(self, image_tokens: int) -> list[int]:
        block = [self.image_token_id] * image_tokens
        return block if self.vision_start is None else [self.vision_start] + block + [self.vision_end]

    def build(self, num_cameras: int, image_tokens: int, instruction: str, text_tokens: int,
              speed_mps: float, yaw_rate_rps: float, query_tokens: int = 1,
              slots: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """-> input_ids (1, S), mm_token_type_ids (1, S) (1 on image tokens)."""
        self.check_query_tokens(query_tokens, slots)
        ids = list(self.bos)
        for _ in range(num_cameras):
            ids += self._image_block(image_tokens)
        ids += self._text(instruction, text_tokens) + [self.slot_token_id] * slots
        ids += self._text(ego_text(speed_mps, yaw_rate_rps), EGO_BYTES)
        ids += self.query_ids
        input_ids = torch.tensor([ids], dtype=torch.long)
        return input_ids, (input_ids == self.image_token_id).to(torch.int32)

    def check_query_tokens(self, query_tokens: int, slots: int = 0) -> None:
        expect(query_tokens == len(self.query_ids), ConfigError,
               f"{self.source}: the head reads {query_tokens} query tokens, its metadata names "
               f"{len(self.query_ids)} ({self.plan_token!r}); name each one in 'plan_token'")
        expect(slots == 0 or self.slot_token_id is not None, ConfigError,
               f"{self.source}: the model fills {slots} prompt slot token(s); name the slot token ('slot_token' in "
               f"the 'hybrid_vla' JSON, e.g. '<TARGET_POINT>')")

    def sequence_length(self, num_cameras: int, image_tokens: int, text_tokens: int, query_tokens: int = 1,
                        slots: int = 0) -> int:
        self.check_query_tokens(query_tokens, slots)
        return len(self.bos) + num_cameras * len(self._image_block(image_tokens)) + text_tokens + slots + \
            EGO_BYTES + query_tokens

    def save(self, directory: Path) -> dict:
        self.tokenizer.save_pretrained(directory)
        return {"plan_token": self.plan_token, **({"slot_token": self.slot_token} if self.slot_token else {})}

    def describe(self) -> str:
        return f"checkpoint tokenizer ({type(self.tokenizer).__name__}), plan token {self.plan_token!r}"


def has_tokenizer(directory: Path) -> bool:
    return any((directory / name).is_file() for name in TOKENIZER_FILES)


def load_prompt(directory: Path, family, config, plan_token: str | None, slot_token: str | None = None) -> TokenizerPrompt:
    """The checkpoint's own tokenizer, offline; the planning query token must be named."""
    from transformers import AutoTokenizer
    source = f"checkpoint '{directory}'"
    expect(plan_token is not None, ConfigError,
           f"{source}: it brings its own tokenizer, so the action head's metadata must name the planning query "
           f"token ('plan_token' in the 'hybrid_vla' JSON; docs/CHECKPOINTS.md)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise ConfigError(f"{source}: its tokenizer cannot be loaded ({exc})") from exc
    return TokenizerPrompt(tokenizer, family, config, plan_token, source, slot_token)
