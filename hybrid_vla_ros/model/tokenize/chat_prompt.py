"""A chat model's prompt, built by its own tokenizer's chat template (OneVL: Qwen3-VL-4B-Instruct's), for a head that
writes its answer as text (model/tokenize/text_waypoints.py).

    template(user: an image per camera, then the instruction; generation prompt)  +  assistant prefix
    each image's one <image_pad> widened to the family's tokens per image

The assistant prefix is what the authors' inference appends after the template (infer_onevl.py: the latent block
`<|start-latent-vis|><|latent-vis|> x4 <|end-latent-vis|><|start-latent|><|latent|> x2 <|end-latent|><answer>`, then
the answer prefix `[` for NAVSIM): plain text the tokenizer splits as it does in theirs. The instruction is fixed per
model (the frame's navigation text is not spliced in): every frame then has the same length, which the packed KV
ring's slots need. The model ends its answer with an end-of-text id; `stop_ids` are those the tokenizer names.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ...errors import ConfigError, expect

END_TOKENS = ("<|im_end|>", "<|endoftext|>")   # Qwen's end of a turn and of text


class ChatPrompt:
    slot_token_id = None

    def __init__(self, tokenizer, family, config, instruction: str, assistant_prefix: str, source: str):
        self.tokenizer, self.source = tokenizer, source
        self.instruction, self.assistant_prefix = instruction, assistant_prefix
        self.image_token_id, self.vision_start, self.vision_end = family.tokenizer_token_ids(config, tokenizer)
        expect(getattr(tokenizer, "chat_template", None), ConfigError,
               f"{source}: the tokenizer has no chat template (tokenizer_config.json 'chat_template' or "
               f"chat_template.jinja), so the prompt the model was trained on cannot be built")
        self.stop_ids = tuple(sorted({i for i in (self._known(t) for t in END_TOKENS) if i is not None}))
        expect(bool(self.stop_ids), ConfigError, f"{source}: the tokenizer has none of {END_TOKENS}: nothing would "
                                                 f"end an answer")
        self.end_texts = tuple(t for t in END_TOKENS if self._known(t) is not None)
        self._cache: dict[tuple[int, int], list[int]] = {}

    def _known(self, token: str) -> int | None:
        found = self.tokenizer.convert_tokens_to_ids([token])[0]
        return None if found is None or found == self.tokenizer.unk_token_id else int(found)

    def _template_ids(self, cameras: int) -> list[int]:
        """The template's ids with one image pad per camera, the assistant prefix after it."""
        content = [{"type": "image"} for _ in range(cameras)] + [{"type": "text", "text": self.instruction}]
        text = self.tokenizer.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                                  add_generation_prompt=True)
        ids = self.tokenizer.encode(text + self.assistant_prefix, add_special_tokens=False)
        pads = sum(1 for i in ids if i == self.image_token_id)
        expect(pads == cameras, ConfigError,
               f"{self.source}: the chat template gave {pads} image pad(s) for {cameras} camera(s) (an image item "
               f"must render as one {self.tokenizer.convert_ids_to_tokens([self.image_token_id])[0]!r})")
        return ids

    def ids(self, cameras: int, image_tokens: int) -> list[int]:
        key = (cameras, image_tokens)
        if key not in self._cache:
            widened: list[int] = []
            for i in self._template_ids(cameras):
                widened += [i] * image_tokens if i == self.image_token_id else [i]
            self._cache[key] = widened
        return self._cache[key]

    def build(self, num_cameras: int, image_tokens: int, instruction: str, text_tokens: int,
              speed_mps: float, yaw_rate_rps: float, query_tokens: int = 1,
              slots: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """-> input_ids (1, S), mm_token_type_ids (1, S). The frame's instruction and ego state are not read (the
        module docstring says why)."""
        input_ids = torch.tensor([self.ids(num_cameras, image_tokens)], dtype=torch.long)
        return input_ids, (input_ids == self.image_token_id).to(torch.int32)

    def sequence_length(self, num_cameras: int, image_tokens: int, text_tokens: int, query_tokens: int = 1,
                        slots: int = 0) -> int:
        return len(self.ids(num_cameras, image_tokens))

    def check_query_tokens(self, query_tokens: int, slots: int = 0) -> None:
        expect(query_tokens == 1 and slots == 0, ConfigError,
               f"{self.source}: a text answer starts after the prompt's last token (1 query token, no slots)")

    def text(self, ids: list[int]) -> str:
        """Decoded ids, the answer prefix in front (what the answer reader parses)."""
        return self.assistant_prefix_tail + self.tokenizer.decode(ids, skip_special_tokens=False)

    @property
    def assistant_prefix_tail(self) -> str:
        """The part of the assistant prefix after its last `>`: the answer's opening the prompt already wrote."""
        return self.assistant_prefix.rpartition(">")[2]

    def save(self, directory: Path) -> dict:
        self.tokenizer.save_pretrained(directory)
        return {}

    def describe(self) -> str:
        return f"checkpoint tokenizer ({type(self.tokenizer).__name__}) and its chat template, answer as text"
