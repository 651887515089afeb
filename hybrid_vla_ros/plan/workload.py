"""What one frame costs, from shapes alone: FLOPs and weight bytes of each decoder block, of the front end
(everything before block 0) and of the head, and the activation and boundary sizes (no ROS, no timing).

FLOPs count a multiply-add as 2. A decoder block at R rows (tokens x passes): 2 R x its linear parameters,
plus attention 2 x 2 x S^2 x hidden per pass, halved for the causal mask (the same rule as
bench/kernels/roofline.py's block_flops). A vision tower: 2 FLOPs per parameter per patch, plus full attention per
image (4 n^2 x width per layer; windowed attention is not modelled: an overestimate for Qwen2.5-VL).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import ConfigError, expect


@dataclass(frozen=True)
class FrontEnd:
    """Vision encoder, projector, scene or query modules: what runs before block 0 on the prefix device."""
    name: str
    flops: float                 # per frame
    params: int                  # weights held on the prefix device
    activation_elems: float      # largest working set of one of its layers (elements)
    note: str = ""


@dataclass(frozen=True)
class Workload:
    name: str
    num_blocks: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    tokens: int                  # per pass: what one prefill of the LLM sees
    front: FrontEnd
    passes: int = 1
    block_params: int = 0        # one decoder block, as built (norms, biases, LoRA adapters); 0: from the shapes
    embed_params: int = 0        # token embedding table (prefix side)
    head_params: int = 0         # final norm + action head (+ an LM head the model keeps) (suffix side)
    head_flops: float = 0.0
    head_tied: bool = False      # the LM head shares the embedding table (one copy when both sides are one device)
    notes: tuple = ()
    head_width: int = 0          # one attention head's width; 0: hidden / heads (VLASpec.head_dim)

    def __post_init__(self) -> None:
        expect(self.num_blocks >= 1 and self.tokens >= 1 and self.passes >= 1, ConfigError,
               f"workload '{self.name}': blocks {self.num_blocks}, tokens {self.tokens}, passes {self.passes}")

    @property
    def rows(self) -> int:
        return self.tokens * self.passes

    @property
    def head_dim(self) -> int:
        return self.head_width or self.hidden // self.heads

    @property
    def linear_params(self) -> int:
        """q, k, v, o and the gated MLP of one block."""
        d = self.head_dim
        return 2 * self.hidden * self.heads * d + 2 * self.hidden * self.kv_heads * d + 3 * self.hidden * self.intermediate

    @property
    def params_per_block(self) -> int:
        return self.block_params or self.linear_params

    @property
    def block_flops(self) -> float:
        attention = 2.0 * 2.0 * self.heads * self.head_dim * self.tokens ** 2 / 2 * self.passes
        return 2.0 * self.rows * self.params_per_block + attention

    @property
    def block_activation_elems(self) -> float:
        """Working set of one block: residual, normed input, q and attention output (4 x hidden), k and v, and the
        MLP's gate, up and product (3 x intermediate), per row; memory-efficient attention (no S x S matrix)."""
        return self.rows * (4 * self.hidden + 2 * self.kv_heads * self.head_dim + 3 * self.intermediate)

    @property
    def boundary_elems(self) -> int:
        return self.rows * self.hidden

    def with_tokens(self, tokens: int) -> "Workload":
        return dataclasses.replace(self, tokens=tokens)

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out.update(rows=self.rows, block_flops=self.block_flops, params_per_block=self.params_per_block,
                   front_flops=self.front.flops)
        return out


def vit_front_end(name: str, depth: int, width: int, mlp_hidden: int, mlp_matrices: int, patches: int, images: int,
                  window: int = 0, global_layers: int | None = None, extra_params: int = 0, extra_flops: float = 0.0,
                  note: str = "") -> FrontEnd:
    """A ViT of `depth` layers (width, MLP hidden with 2 or 3 matrices) on `images` images of `patches` patches;
    window > 0: windowed attention of window^2 patches except in `global_layers` layers. extra_*: what follows
    it (projector, query decoders), stated by the caller."""
    layer_params = 4 * width * width + mlp_matrices * width * mlp_hidden
    params = depth * layer_params
    tokens = patches * images
    global_layers = depth if global_layers is None or not window else global_layers
    keys_window = min(patches, window * window) if window else patches
    attention = images * 4.0 * width * patches * (global_layers * patches + (depth - global_layers) * keys_window)
    flops = 2.0 * tokens * params + attention + extra_flops
    return FrontEnd(name, flops, params + extra_params, tokens * (4 * width + mlp_matrices * mlp_hidden), note)


def _vision_front_end(model, params: int) -> FrontEnd:
    """A preset's own vision tower (or scene encoder), counted from the built model's shapes."""
    spec, family = model.spec, model.family
    images, per_image = family.image_blocks(spec)
    if model.scene_encoder is not None:
        cfg = spec.scene_config
        patches = (cfg.get("image_height", 56) // cfg.get("patch_size", 14)) * \
                  (cfg.get("image_width", 56) // cfg.get("patch_size", 14))
        images, width, depth = cfg.get("cameras", 1), cfg.get("width", 32), cfg.get("depth", 1)
    else:
        patches, width, depth = per_image * family.patch_merge ** 2, spec.vision_hidden, spec.vision_depth
    attention = images * depth * 4.0 * width * patches * patches
    flops = 2.0 * images * patches * params + attention
    note = (f"{images} image(s) x {patches} patches, {depth} layers of width {width}: 2 FLOPs per parameter per "
            f"patch + full attention per image")
    return FrontEnd(f"{spec.name} front end", flops, params, images * patches * 6 * width, note)


def workload_from_model(model, tokens: int | None = None) -> Workload:
    """The workload of a built (or meta) VLAModel: parameter counts from its modules, shapes from its spec.
    tokens: per pass, default the model's fixed sequence length."""
    from ..engine.scheduling.partition import module_bytes, prefix_modules
    spec, decoder = model.spec, model.decoder
    embed = module_bytes([decoder.embed_tokens])[0]
    front_params = module_bytes(prefix_modules(model, 0))[0] - embed
    head_params = module_bytes([decoder.norm, model.action_head])[0]
    rows = model.query_tokens * model.num_passes
    head_flops = 2.0 * rows * module_bytes([model.action_head])[0]
    return Workload(name=spec.name, num_blocks=model.num_blocks, hidden=spec.hidden_size, heads=spec.num_heads,
                    kv_heads=spec.num_kv_heads, intermediate=spec.intermediate_size,
                    tokens=tokens or model.sequence_length, passes=model.num_passes,
                    front=_vision_front_end(model, front_params),
                    block_params=module_bytes([decoder.layers[0]])[0], embed_params=embed,
                    head_params=head_params, head_flops=head_flops,
                    notes=(f"{spec.family} preset '{spec.name}': parameter counts from the built modules",),
                    head_width=spec.head_dim)


__all__ = ["FrontEnd", "Workload", "vit_front_end", "workload_from_model"]
