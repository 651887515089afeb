"""The VLA module: an HF vision-language backbone plus an action head at the planning query token."""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

from ..errors import ConfigError, expect
from .tokenize.action_tokens import ActionTokenizer, TokenHead
from .families import get_family
from .lora import attach_adapters
from .prompt_embeddings import PromptEmbeddings
from .plugins import HEADS, SCENE_ENCODERS, head_config, plugin_class
from ..context import CONTEXT_TENSORS
from .plugins.head_inputs import SIDE_INPUTS, check_side_inputs, side_inputs, split_output
from .preprocess import ImageProcessing
from .tokenize.prompt import BytePrompt
from .seeded import SeededWeights, parameters_on_meta
from .spec import VLASpec
from .tokenize.tokens import MIN_VOCAB


def waypoints_from_head(raw: torch.Tensor, dt_s: float) -> torch.Tensor:
    """(B, N, 4) head output -> (B, N, 5): x, y (cumulated steps), heading, speed, time_from_start."""
    xy = raw[..., :2].double().cumsum(dim=1)
    n = raw.shape[1]
    t = torch.arange(1, n + 1, dtype=torch.float64, device=raw.device).mul(dt_s).expand(raw.shape[0], n)
    return torch.cat([xy, raw[..., 2:4].double(), t.unsqueeze(-1)], dim=-1)


def make_action_head(spec: VLASpec) -> nn.Module:
    """The spec's head, freshly initialised: action-token logits over the bins, or its waypoint head plugin
    (configured from the spec: num_waypoints, head_hidden, query_tokens and the plugin's own head_config)."""
    if spec.action_head == "tokens":
        return TokenHead(spec.hidden_size, spec.action_bins)
    if spec.action_head == "text":   # the LLM's own output table (V, H): a text answer's logits over every id
        return nn.Linear(spec.hidden_size, spec.vocab_size, bias=False)
    head = plugin_class(HEADS, spec.head).from_config(head_config(spec), spec.hidden_size, spec)
    expect(head.query_tokens == spec.query_tokens * spec.num_passes, ConfigError,
           f"head {spec.head!r} reads {head.query_tokens} query tokens, the prompt of '{spec.name}' has "
           f"{spec.query_tokens} in each of its {spec.num_passes} pass(es)")
    check_side_inputs(head, SIDE_INPUTS)
    return head


def make_scene_encoder(spec: VLASpec):
    """The spec's scene encoder plugin (scene_* families), freshly initialised; None for a vision tower."""
    if not spec.scene_encoder:
        return None
    encoder = plugin_class(SCENE_ENCODERS, spec.scene_encoder).from_config(spec.scene_config, spec.hidden_size, spec)
    check_side_inputs(encoder, CONTEXT_TENSORS)
    return encoder


class VLAModel(nn.Module):
    """backbone_config: the HF config a checkpoint came with (exact rope, eps, ...); default: built from spec."""

    def __init__(self, spec: VLASpec, backbone_config=None):
        super().__init__()
        expect(spec.vocab_size >= MIN_VOCAB, ConfigError,
               f"spec '{spec.name}': vocab_size={spec.vocab_size}, expected >= {MIN_VOCAB} (bytes + specials)")
        self.spec = spec
        self.family = get_family(spec.family)
        self.image_processing = ImageProcessing.for_spec(spec)  # a checkpoint's preprocessor_config may change it
        self.prompt = BytePrompt()                                # a checkpoint's own tokenizer replaces it
        self.backbone = self.family.model_class(backbone_config or self.family.build_config(spec))
        if any(p.get("adapter") for p in spec.passes):
            attach_adapters(self.decoder, spec)   # LoRA per pass inside the blocks (model/lora.py)
        self.scene_encoder = make_scene_encoder(spec)
        self.action_head = make_action_head(spec)
        if spec.action_head == "tokens":
            self.action_tokenizer = ActionTokenizer(spec)
        self.prompt_embeddings = PromptEmbeddings(spec, spec.hidden_size) \
            if spec.query_embeddings or spec.prompt_slots else None
        self.int8_calibration = None   # an int8 suffix's smoothing (engine/int8_calibration.py), from a checkpoint

    @property
    def kind(self) -> str:
        """How the graph serves it (ros/nodes/serving): "waypoints" (one boundary state a frame) or "tokens"
        (ActionFlow's packed decode steps: action tokens, or a text answer); the HVLM header's kind
        (engine/handover/message.py KINDS)."""
        return "waypoints" if self.spec.action_head == "waypoints" else "tokens"

    @property
    def decoder(self):
        return self.family.language_model(self.backbone)

    @property
    def num_blocks(self) -> int:
        return len(self.decoder.layers)

    @property
    def query_tokens(self) -> int:
        """The prompt's last tokens whose final hidden states the head reads."""
        return self.spec.query_tokens

    @property
    def num_passes(self) -> int:
        """Rows of every hidden state: one per pass."""
        return self.spec.num_passes

    def instructions(self, frame_instruction: str) -> list[str]:
        """The prompt instruction of each pass (a pass without its own takes the frame's)."""
        return [p.get("instruction") or frame_instruction for p in self.spec.passes] or [frame_instruction]

    def embed_prompt(self, input_ids: torch.Tensor, context) -> torch.Tensor:
        """input_ids (P, S) -> token embeddings (P, S, H), the query and slot rows written (prompt_embeddings.py)."""
        embeds = self.decoder.embed_tokens(input_ids)
        if self.prompt_embeddings is None:
            return embeds
        return self.prompt_embeddings(input_ids, embeds, context, self.prompt.slot_token_id)

    @contextmanager
    def prompt_embeddings_applied(self, context):
        """Inside: the embedding table's every call writes the query and slot rows (for HF's own forward, which
        embeds the ids itself); nothing for a model without prompt embeddings."""
        if self.prompt_embeddings is None:
            yield
            return
        def write(module, args, output):
            return self.prompt_embeddings(args[0], output, context, self.prompt.slot_token_id)
        handle = self.decoder.embed_tokens.register_forward_hook(write)
        try:
            yield
        finally:
            handle.remove()

    def query_rows(self, hidden: torch.Tensor, last: int) -> torch.Tensor:
        """hidden (P, S, H) -> the head's input (1, P * q, H): every pass's q query tokens ending at `last`."""
        rows = hidden[:, last - self.query_tokens + 1:last + 1]                        # (P, q, H)
        return rows.reshape(1, -1, rows.shape[-1])

    def run_head(self, head, hidden: torch.Tensor, last: int, context, stamp_ns: int,
                 where: str = "head") -> tuple[torch.Tensor, dict]:
        """The waypoint head on a frame's final normed rows hidden (P, S', H), its query tokens ending at `last`
        (an index into those rows), with the side inputs it declares (plugins/head_inputs.py; a head reading the
        sequence needs all S rows) -> (raw steps (1, N, 4), extras)."""
        side = side_inputs(head, hidden, context, stamp_ns, (self.spec.image_width, self.spec.image_height),
                           self.spec.num_cameras)
        out = head(self.query_rows(hidden, last), **side)
        return split_output(out, self.spec.head, where)

    @property
    def image_tokens(self) -> int:
        blocks, per_block = self.family.image_blocks(self.spec)
        return blocks * per_block

    @property
    def sequence_length(self) -> int:
        """Tokens of every frame's prompt (fixed: the pipeline's buffers never change shape)."""
        blocks, per_block = self.family.image_blocks(self.spec)
        return self.prompt.sequence_length(blocks, per_block, self.spec.text_tokens, self.spec.query_tokens,
                                           self.spec.slot_tokens)

    def reset_memory(self, reason: str = "requested", stamp_ns: int = 0) -> bool:
        """Forget the scene encoder's cross-frame memory; False when the model keeps none."""
        if self.scene_encoder is None:
            return False
        self.scene_encoder.reset(reason, stamp_ns)
        return True


def build_model(spec: VLASpec, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
                lazy: bool = False) -> VLAModel:
    """Seeded random weights (deterministic for a spec). device='meta' builds shapes only. A real-size preset
    is built with its parameters on the meta device and drawn per tensor (model/seeded.py): all of them now,
    or with lazy=True only those a stage asks for (ensure_loaded)."""
    if str(device) == "meta":
        with torch.device("meta"):
            return VLAModel(spec).to(dtype).eval()
    if spec.real_size:
        with parameters_on_meta():
            model = VLAModel(spec).eval()
        model.seeded_weights = SeededWeights(spec)
        if not lazy:
            model.seeded_weights.materialise(model, [model], dtype, device)
            model.to(device=device, dtype=dtype)   # the buffers (rotary tables) too
        return model
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = VLAModel(spec)
    return model.to(device=device, dtype=dtype).eval()
