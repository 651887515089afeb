"""The interface every backbone family implements (model/registry.py finds them by name).

A family is one module in this folder (vLLM's `model_executor/models/` shape): it says its HF config and
model classes, how it embeds images, its position ids, its prompt's token layout, its image preprocessing
defaults and its checkpoint key layouts. The engine, the loader and the prompt ask the family through this
interface; nothing outside this folder tests a family's name. Adding a family = a new module here that
subclasses `Family`, its line in model/registry.py's table, its preset(s) in model/presets.py, and its tests.
"""

from __future__ import annotations

import torch

from ...errors import ConfigError, expect
from ..tokenize.tokens import BOS, PAD

ATTN_IMPL = "sdpa"


class Family:
    """One backbone architecture. Subclasses set the class attributes and implement the methods."""

    name: str = ""                       # VLASpec.family
    model_types: tuple[str, ...] = ()    # config.json model_type values this family loads
    patch_merge: int = 1                 # patches merged per image side before the LLM (image sides: multiples)
    centre_crop: bool = False            # the HF image processor's default: shortest edge, then centre crop
    # config attribute -> the built-in prompt's id for it (model/tokenize/tokens.py); a checkpoint with other ids
    # must bring its own tokenizer
    special_token_fields: dict[str, int] = {}
    # checkpoint key prefix -> ours, for layouts saved from the generation classes or older transformers
    key_prefixes: tuple[tuple[str, str], ...] = (("model.language_model.", "language_model."),
                                                 ("language_model.model.", "language_model."),
                                                 ("model.", "language_model."))

    scene_encoded = False                # image tokens come from a scene encoder plugin (scene_llm.py)
    causal_prompt = True                 # False: a prefix-LM mask over part of the prompt (chunked prefill refused)

    # ---- building ------------------------------------------------------------------------------------
    @property
    def model_class(self):
        """The transformers backbone class (no generation head)."""
        raise NotImplementedError

    def build_config(self, spec):
        """VLASpec -> the transformers config of the backbone."""
        raise NotImplementedError

    def vision_spec_fields(self, config) -> dict:
        """A checkpoint's transformers config -> the VLASpec vision fields it implies (may override patch_size)."""
        raise NotImplementedError

    def check_spec(self, spec) -> None:
        """The family's own shape rules of a VLASpec (ConfigError); untiled families take no tile_size."""
        expect(spec.tile_size == 0, ConfigError,
               f"spec '{spec.name}': tile_size={spec.tile_size!r}, but {spec.family} does not tile images (keep 0)")
        expect(spec.head_dim in (0, spec.hidden_size // spec.num_heads) or self.name == "qwen3_vl", ConfigError,
               f"spec '{spec.name}': head_dim={spec.head_dim} other than hidden / heads: only qwen3_vl builds it here")

    # ---- one frame's inputs --------------------------------------------------------------------------
    def image_tokens_per_camera(self, spec) -> int:
        raise NotImplementedError

    def pixel_inputs(self, spec, images: torch.Tensor) -> dict:
        """images (N, 3, H, W) float, normalised -> the tensors the vision encoder takes."""
        raise NotImplementedError

    def image_features(self, vlm, pixels: dict) -> torch.Tensor:
        """-> (N * image_tokens_per_camera, hidden): what replaces the image tokens' embeddings."""
        raise NotImplementedError

    def camera_pixels(self, spec, pixels: dict, camera: int) -> dict | None:
        """The pixel tensors of one camera alone, for encoding camera by camera (chunked prefill); None when the
        family cannot encode a camera alone. Default: every tensor's rows split evenly over the cameras (each
        camera's images, tiles, patches and grid rows are consecutive and equal in number)."""
        n = spec.image_slots
        if not pixels or any(t.shape[0] % n for t in pixels.values()):
            return None
        return {name: t.chunk(n)[camera] for name, t in pixels.items()}

    # ---- DeepStack (Qwen3-VL): vision features added after the first decoder blocks ----------------------------
    max_deepstack = 0                    # a spec's deepstack_blocks may not exceed it (0: the family has none)

    def deepstack_blocks(self, config) -> int:
        """Decoder blocks after which image features are added (a backbone config's DeepStack depth k)."""
        return 0

    def frame_features(self, model, pixels: dict, ego: torch.Tensor, stamp_ns: int, context=None):
        """One frame's image-token features (n_img, H) and DeepStack additions; a scene-encoded family runs
        its scene encoder here (ego (2,), the stamp and the frame context are its inputs too)."""
        return self.image_features_and_deepstack(model.backbone, pixels)

    def image_features_and_deepstack(self, vlm, pixels: dict) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """-> the image features and the additions for blocks 0 .. k-1 (none but for DeepStack families)."""
        return self.image_features(vlm, pixels), []

    def deepstack(self, image_mask: torch.Tensor, additions: list[torch.Tensor]):
        """image_mask (1, S) bool -> the frame's types.DeepStack, or None."""
        return None

    @staticmethod
    def position_ids_shape(seq_len: int) -> tuple[int, ...]:
        """The layout of one frame's position ids: (1, S) for 1-D RoPE, (3, 1, S) for M-RoPE."""
        return (1, seq_len)

    def position_ids(self, vlm, input_ids: torch.Tensor, mm_token_type_ids: torch.Tensor, pixels: dict):
        b, s = input_ids.shape
        return torch.arange(s, device=input_ids.device).unsqueeze(0).expand(b, s)  # (B, S)

    def reference_kwargs(self, pixels: dict, mm_token_type_ids: torch.Tensor) -> dict:
        """Keyword arguments of HF's own unsplit forward (the exactness reference) for these inputs."""
        raise NotImplementedError

    def image_blocks(self, spec) -> tuple[int, int]:
        """The prompt's image blocks: (blocks, tokens per block); one per camera for a vision tower."""
        return spec.image_slots, self.image_tokens_per_camera(spec)

    def reference_inputs(self, model, encoded, frame) -> dict:
        """Keyword arguments of HF's own unsplit backbone forward for one encoded frame."""
        return {"input_ids": encoded.input_ids, **self.reference_kwargs(encoded.pixels, encoded.mm_token_type_ids)}

    # ---- prompt and decoder --------------------------------------------------------------------------
    def prompt_token_ids(self, config) -> tuple[int, int | None, int | None]:
        """A checkpoint's config -> (image token, vision start or None, vision end or None)."""
        raise NotImplementedError

    def tokenizer_token_ids(self, config, tokenizer) -> tuple[int, int | None, int | None]:
        """The same with a checkpoint's own tokenizer (a family whose start/end tokens are only in the tokenizer
        looks them up there); default: the config's ids."""
        return self.prompt_token_ids(config)

    @staticmethod
    def language_model(vlm):
        """The decoder stack: has embed_tokens, layers, norm, rotary_emb."""
        return vlm.language_model


def text_fields(spec) -> dict:
    """The decoder's config fields every family shares, from a VLASpec."""
    return dict(hidden_size=spec.hidden_size, num_hidden_layers=spec.num_blocks,
                num_attention_heads=spec.num_heads, num_key_value_heads=spec.num_kv_heads,
                intermediate_size=spec.intermediate_size, vocab_size=spec.vocab_size,
                max_position_embeddings=4096, rms_norm_eps=1e-6, bos_token_id=BOS,
                eos_token_id=None, pad_token_id=PAD)
