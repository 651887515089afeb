"""A VLA's shape as one plain dataclass, and the table of named presets.

A VLA here = an HF transformers vision-language model (the backbone) + a small action head that reads
the final hidden state at the planning query token. The spec fixes every shape, so one spec (plus a seed
or a safetensors file) fully defines a model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..errors import ConfigError, expect
from .families import family_names, get_family
from .tokens import MIN_VOCAB

ACTION_HEADS = ("waypoints", "tokens")


@dataclass(frozen=True)
class VLASpec:
    name: str
    family: str  # a registered family (model/families/): the HF backbone classes and the token layout
    # Language model (the part that gets partitioned).
    num_blocks: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    vocab_size: int = 512  # byte tokens (256) + specials; real checkpoints bring their own
    # Vision encoder (always on the prefix device).
    vision_depth: int = 2
    vision_hidden: int = 64
    vision_heads: int = 4
    vision_intermediate: int = 128
    patch_size: int = 14
    # DeepStack (Qwen3-VL): decoder blocks 0 .. deepstack_blocks-1 each get an addition at the image tokens from
    # one more ViT layer; 0 for every other family
    deepstack_blocks: int = 0
    image_height: int = 56
    image_width: int = 56
    num_cameras: int = 1  # ORION and MindDrive take six surround cameras
    tile_size: int = 0  # InternVL: each camera image is cut into square tiles of this side; 0: untiled families
    # Prompt: instruction bytes are padded/truncated to a fixed count so every frame has the same
    # sequence length (lets the pipeline reuse preallocated boundary buffers).
    text_tokens: int = 16
    # Action head.
    num_waypoints: int = 8
    waypoint_dt_s: float = 0.5
    head_hidden: int = 64
    # Waypoint head: a plugin (model/plugins/heads.py: "mlp", "gru", or an installed package's) reading the final
    # hidden states of the prompt's last `query_tokens` tokens; head_config: the plugin's own extra settings.
    head: str = "mlp"
    head_config: dict = field(default_factory=dict)
    query_tokens: int = 1
    # Scene encoder (scene_* families): a plugin (model/plugins/scene_encoders.py: "query_scene", or an installed
    # package's) turning a frame's cameras + ego state into scene tokens; scene_config: its JSON config.
    scene_encoder: str = ""
    scene_config: dict = field(default_factory=dict)
    # Passes (MindDrive: decision, then action): each {"name", "instruction" (default: the frame's), "adapter"
    # (a LoRA adapter's name, or none)}, run as one batch over the same scene tokens; the head reads the query
    # tokens of every pass, in pass order. Adapters: rank lora_rank, scaling lora_alpha / lora_rank, on the
    # lora_targets linears of every block (model/lora.py). Empty: one pass, the frame's instruction, no adapter.
    passes: list = field(default_factory=list)
    lora_rank: int = 0
    lora_alpha: float = 16.0
    lora_targets: list = field(default_factory=lambda: ["q_proj", "v_proj"])
    # "waypoints": a head reads all waypoints from the query token's hidden state in one forward;
    # "tokens": each waypoint step's x and y are action tokens decoded one at a time (OpenVLA-style), from
    # `action_bins` bins over [-action_step_range_m, +action_step_range_m] at the top of the vocabulary.
    action_head: str = "waypoints"
    action_bins: int = 256
    action_step_range_m: float = 4.0
    # Real-size presets (the shapes of published models): built on the meta device, each stage's tensors drawn
    # on demand by a per-tensor seeded init in the stage's dtype (model/seeded.py); `info` answers from shapes.
    real_size: bool = False
    seed: int = 0
    # The prompt's instruction while a route navigates (route/text.py): a format string over {command},
    # {distance_m}, {goal_x}, {goal_y}, {target_x}, {target_y}; empty = route/text.py DEFAULT_TEMPLATE.
    instruction_template: str = ""
    # The frame context pieces (context.py CONTEXT_PIECES: cameras, pose, history, navigation) the model needs: a
    # frame lacking one is refused at the prefix (context_missing_<piece>); pieces not named are filled where known.
    context: list = field(default_factory=list)
    notes: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        expect(self.family in family_names(), ConfigError,
               f"spec '{self.name}': family '{self.family}' is not one of {family_names()}")
        for name in ("num_blocks", "hidden_size", "num_heads", "num_kv_heads", "num_cameras",
                     "num_waypoints", "text_tokens", "image_height", "image_width"):
            value = getattr(self, name)
            expect(isinstance(value, int) and value > 0, ConfigError,
                   f"spec '{self.name}': {name}={value!r}, expected a positive integer")
        expect(self.hidden_size % self.num_heads == 0, ConfigError,
               f"spec '{self.name}': hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        expect(self.waypoint_dt_s > 0, ConfigError,
               f"spec '{self.name}': waypoint_dt_s={self.waypoint_dt_s}, expected > 0")
        expect(self.action_head in ACTION_HEADS, ConfigError,
               f"spec '{self.name}': action_head '{self.action_head}' is not one of {ACTION_HEADS}")
        if self.action_head == "tokens":
            free = self.vocab_size - MIN_VOCAB
            expect(isinstance(self.action_bins, int) and 2 <= self.action_bins <= free, ConfigError,
                   f"spec '{self.name}': action_bins={self.action_bins!r}, expected 2..{free} (the vocabulary "
                   f"ids above the prompt's {MIN_VOCAB}; raise vocab_size for more)")
            expect(self.action_step_range_m > 0, ConfigError,
                   f"spec '{self.name}': action_step_range_m={self.action_step_range_m}, expected > 0")
        from ..context import CONTEXT_PIECES
        expect(isinstance(self.context, list) and all(p in CONTEXT_PIECES for p in self.context), ConfigError,
               f"spec '{self.name}': context={self.context!r}, expected a list of {list(CONTEXT_PIECES)}")
        if self.instruction_template:   # route/ is ROS-free and torch-free: checked here, at load
            from ..route.text import check_template
            check_template(self.instruction_template)
        family = get_family(self.family)
        self._check_plugins(family)
        family.check_spec(self)
        expect(isinstance(self.deepstack_blocks, int) and 0 <= self.deepstack_blocks <= family.max_deepstack and
               self.deepstack_blocks <= min(self.num_blocks, self.vision_depth), ConfigError,
               f"spec '{self.name}': deepstack_blocks={self.deepstack_blocks!r}, expected 0..{family.max_deepstack} for "
               f"{self.family} and at most num_blocks and vision_depth")
        step = self.patch_size * family.patch_merge  # image sides: whole merged patches
        for side in ("image_height", "image_width"):
            expect(getattr(self, side) % step == 0, ConfigError,
                   f"spec '{self.name}': {side}={getattr(self, side)} must be a multiple of {step} for {self.family}")

    def _check_plugins(self, family) -> None:
        expect(isinstance(self.query_tokens, int) and self.query_tokens >= 1 and
               (self.query_tokens == 1 or self.action_head == "waypoints"), ConfigError,
               f"spec '{self.name}': query_tokens={self.query_tokens!r}, expected >= 1 (1 for action tokens)")
        expect(bool(self.scene_encoder) == family.scene_encoded, ConfigError,
               f"spec '{self.name}': family {self.family} " + ("needs a scene_encoder plugin" if family.scene_encoded
                                                               else f"has its own vision tower, not a scene encoder "
                                                                    f"({self.scene_encoder!r})"))
        for name in ("head_config", "scene_config"):
            expect(isinstance(getattr(self, name), dict), ConfigError, f"spec '{self.name}': {name} must be a dict")
        self._check_passes(family)

    def _check_passes(self, family) -> None:
        if not self.passes:
            return
        where = f"spec '{self.name}': passes"
        expect(family.scene_encoded and self.action_head == "waypoints", ConfigError,
               f"{where}: several passes are served for scene-encoded families with a waypoint head (one image "
               f"block shared by the passes); {self.family} / {self.action_head} is not")
        names = [p.get("name") if isinstance(p, dict) else None for p in self.passes]
        expect(all(isinstance(n, str) and n for n in names) and len(set(names)) == len(names), ConfigError,
               f"{where}: each pass must be a dict with a unique non-empty 'name' (got {self.passes!r})")
        for p in self.passes:
            unknown = sorted(set(p) - {"name", "instruction", "adapter"})
            expect(not unknown, ConfigError, f"{where}: pass {p['name']!r} has unknown keys {unknown}")
        adapted = any(p.get("adapter") for p in self.passes)
        expect(not adapted or (isinstance(self.lora_rank, int) and self.lora_rank >= 1 and self.lora_targets),
               ConfigError, f"{where}: adapters need lora_rank >= 1 and lora_targets (got {self.lora_rank!r}, "
                            f"{self.lora_targets!r})")

    @property
    def num_passes(self) -> int:
        return max(1, len(self.passes))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict, source: str) -> "VLASpec":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        expect(not unknown, ConfigError, f"{source}: unknown spec fields {unknown}; known: {sorted(known)}")
        try:
            return cls(**data)
        except TypeError as exc:  # missing required fields
            raise ConfigError(f"{source}: {exc}") from exc


_TINY = dict(num_blocks=4, hidden_size=64, num_heads=4, num_kv_heads=2, intermediate_size=128,
             vision_depth=2, vision_hidden=32, vision_heads=2, vision_intermediate=64,
             image_height=56, image_width=56, num_cameras=2, text_tokens=12, head_hidden=32)

# tiny-scene: the MindDrive shape at toy size: a Qwen2 LLM fed 6 scene + 2 history tokens by the reference scene
# encoder (model/plugins/scene_encoders.py) over 2 cameras, with a memory of 3 past frames; two passes (decision,
# action) with LoRA adapters of their own; a GRU head reading the 2 query tokens of each pass.
_SCENE = dict(width=32, depth=1, heads=2, patch_size=14, scene_queries=6, history_queries=2, memory_frames=3)
_TINY_SCENE = dict({k: v for k, v in _TINY.items() if not k.startswith("vision_")},  # no vision tower
                   scene_encoder="query_scene", head="gru", query_tokens=2, lora_rank=4,
                   passes=[{"name": "decision", "instruction": "decide: keep lane, turn, stop", "adapter": "decision"},
                           {"name": "action", "adapter": "action"}],
                   scene_config={**_SCENE, "image_height": 56, "image_width": 56, "cameras": 2})

# bench: one frame costs a few hundred ms on one core here (see docs/BENCHMARKS.md).
_BENCH = dict(num_blocks=16, hidden_size=576, num_heads=9, num_kv_heads=3, intermediate_size=1536,
              vision_depth=2, vision_hidden=192, vision_heads=3, vision_intermediate=384,
              image_height=112, image_width=112, num_cameras=6, text_tokens=32, head_hidden=256)

_REAL_SCENE = dict(width=1024, depth=24, heads=16, patch_size=16, history_queries=16, memory_frames=16,
                   image_height=640, image_width=640, cameras=6)

_QWEN3_TINY = dict(patch_size=16, image_height=64, image_width=64, vision_depth=3, deepstack_blocks=2)

PRESETS: dict[str, VLASpec] = {
    "tiny": VLASpec(name="tiny", family="qwen2_vl", **_TINY,
                    notes="Qwen2-VL family (M-RoPE), unit-test size"),
    "tiny-qwen2.5": VLASpec(name="tiny-qwen2.5", family="qwen2_5_vl", **_TINY,
                            notes="Qwen2.5-VL family (MindDrive backbone family), unit-test size"),
    "tiny-llava": VLASpec(name="tiny-llava", family="llava", **{**_TINY, "image_height": 28, "image_width": 28},
                          notes="LLaVA family (CLIP + Llama, ORION backbone family), unit-test size"),
    # Qwen3-VL: 16-px patches (image sides: multiples of 32) and DeepStack into decoder blocks 0, 1 (of 4): the
    # cuts p = 0, 1 carry DeepStack additions over the boundary, p >= 2 none.
    "tiny-qwen3vl": VLASpec(name="tiny-qwen3vl", family="qwen3_vl", **{**_TINY, **_QWEN3_TINY},
                            notes="Qwen3-VL family (interleaved M-RoPE, DeepStack into 2 blocks), unit-test size"),
    "tiny-internvl": VLASpec(name="tiny-internvl", family="internvl", **{**_TINY, "image_width": 112}, tile_size=56,
                             notes="InternVL family (InternViT, pixel shuffle, Qwen2), 2 tiles/camera, unit-test size"),
    "tiny-scene": VLASpec(name="tiny-scene", family="scene_qwen2", **_TINY_SCENE,
                          notes="Qwen2 LLM + reference scene encoder with memory (ORION/MindDrive shape), GRU head "
                                "on 2 query tokens, unit-test size"),
    "bench-scene": VLASpec(name="bench-scene", family="scene_qwen2",
                           **{k: v for k, v in _BENCH.items() if not k.startswith("vision_")},
                           scene_encoder="query_scene", head="gru", query_tokens=2, lora_rank=8,
                           scene_config={**_SCENE, "width": 192, "depth": 2, "heads": 3, "scene_queries": 96,
                                         "history_queries": 32, "memory_frames": 4, "image_height": 112,
                                         "image_width": 112, "cameras": 6},
                           passes=_TINY_SCENE["passes"],
                           notes="the MindDrive shape at bench size: 128 scene tokens from 6 cameras, two passes"),
    "bench": VLASpec(name="bench", family="qwen2_vl", **_BENCH,
                     notes="Qwen2-VL family, six cameras; a few hundred ms per frame on one core"),
    # A real-width slice: minddrive-like's decoder blocks and tokens (6 cameras of 224x392: 734) over 4 blocks
    # and bench's vision tower. Per-block costs, chunked prefill's GEMM shapes and stage balance as at real size.
    "bench-wide": VLASpec(name="bench-wide", family="qwen2_5_vl", **{**_BENCH, "num_blocks": 4, "hidden_size": 2048,
                          "num_heads": 16, "num_kv_heads": 2, "intermediate_size": 11008, "image_height": 224,
                          "image_width": 392}, notes="minddrive-like's block width and 734 tokens over 4 blocks"),
    "bench-llava": VLASpec(name="bench-llava", family="llava",
                           **{**_BENCH, "image_height": 56, "image_width": 56},
                           notes="LLaVA family at bench size"),
    "bench-internvl": VLASpec(name="bench-internvl", family="internvl", **{**_BENCH, "image_width": 224},
                              tile_size=112, notes="InternVL family at bench size, 2 tiles per camera"),
    # drive: the model `hybrid-vla train` trains on synthetic road drives (the front camera).
    "drive": VLASpec(name="drive", family="qwen2_vl", num_blocks=4, hidden_size=128, num_heads=4, num_kv_heads=2,
                     intermediate_size=256, vision_depth=2, vision_hidden=64, vision_heads=2, vision_intermediate=128,
                     image_height=112, image_width=112, num_cameras=1, text_tokens=8, head_hidden=128,
                     notes="Qwen2-VL family, one front camera: trained on synthetic road drives (hybrid-vla train)"),
    # Action tokens (engine/actionflow/packing.py): each waypoint step's x, y decoded as tokens.
    "tiny-act": VLASpec(name="tiny-act", family="qwen2_vl", **{**_TINY, "num_waypoints": 4}, action_head="tokens",
                        vocab_size=MIN_VOCAB + 256, notes="Qwen2-VL family, action tokens (8 per frame), unit-test size"),
    "tiny-llava-act": VLASpec(name="tiny-llava-act", family="llava",
                              **{**_TINY, "image_height": 28, "image_width": 28, "num_waypoints": 4},
                              action_head="tokens", vocab_size=MIN_VOCAB + 256,
                              notes="LLaVA family, action tokens (8 per frame), unit-test size"),
    "tiny-qwen3vl-act": VLASpec(name="tiny-qwen3vl-act", family="qwen3_vl",
                                **{**_TINY, **_QWEN3_TINY, "num_waypoints": 4}, action_head="tokens",
                                vocab_size=MIN_VOCAB + 256,
                                notes="Qwen3-VL family (DeepStack into 2 blocks), action tokens (8 per frame)"),
    # bench-act: a short prompt (one camera) and 16 action tokens, so decode steps dominate a frame's time.
    "bench-act": VLASpec(name="bench-act", family="qwen2_vl", **{**_BENCH, "num_cameras": 1, "text_tokens": 16},
                         action_head="tokens", vocab_size=MIN_VOCAB + 256,
                         notes="Qwen2-VL family, one camera, 16 action tokens per frame: decode-bound"),
    # Real size: materialised on demand, side by side (model/seeded.py); `hybrid-vla info` from the shapes.
    "orion-like": VLASpec(name="orion-like", family="llava", num_blocks=32, hidden_size=4096, num_heads=32,
                          num_kv_heads=32, intermediate_size=11008, vocab_size=32064, vision_depth=24,
                          vision_hidden=1024, vision_heads=16, vision_intermediate=4096,
                          image_height=336, image_width=336, num_cameras=6, text_tokens=32,
                          head_hidden=1024, num_waypoints=6, real_size=True,
                          notes="LLaVA-7B shapes (CLIP ViT-L/14-336 + 32 x 4096 Llama blocks), like ORION"),
    "alpamayo-like": VLASpec(name="alpamayo-like", family="qwen3_vl", num_blocks=36, hidden_size=4096, num_heads=32,
                             num_kv_heads=8, intermediate_size=12288, vocab_size=151936, vision_depth=27,
                             vision_hidden=1152, vision_heads=16, vision_intermediate=4304, patch_size=16,
                             deepstack_blocks=3, image_height=320, image_width=576, num_cameras=16, text_tokens=32,
                             head_hidden=1024, num_waypoints=6, real_size=True,
                             notes="Qwen3-VL-8B shapes, 4 cameras x 4 frames of 320 x 576 (2880 image tokens), "
                                   "like Alpamayo 1"),
    "minddrive-like": VLASpec(name="minddrive-like", family="qwen2_5_vl", num_blocks=36, hidden_size=2048,
                              num_heads=16, num_kv_heads=2, intermediate_size=11008, vocab_size=151936,
                              vision_depth=32, vision_hidden=1280, vision_heads=16, vision_intermediate=3420,
                              image_height=224, image_width=392, num_cameras=6, text_tokens=32,
                              head_hidden=1024, num_waypoints=6, real_size=True,
                              notes="Qwen2.5-VL-3B shapes, like MindDrive's larger backbone"),
    # ORION / MindDrive at real size: their front end's shapes (EVA-02-L-sized ViT on 6 cameras of 640^2, 16-px
    # patches; ~530 scene + history tokens) in the reference scene encoder, over a plain Llama-7B / Qwen2.5-3B.
    "orion-scene-like": VLASpec(name="orion-scene-like", family="scene_llama", num_blocks=32, hidden_size=4096,
                                num_heads=32, num_kv_heads=32, intermediate_size=11008, vocab_size=32000,
                                scene_encoder="query_scene", head="gru", real_size=True, text_tokens=32,
                                head_hidden=1024, num_waypoints=6, num_cameras=6,
                                scene_config={**_REAL_SCENE, "scene_queries": 512},
                                notes="ORION's shape: 512 scene/map queries + 16 history over Llama-7B, one pass"),
    "minddrive-scene-like": VLASpec(name="minddrive-scene-like", family="scene_qwen2", num_blocks=36,
                                    hidden_size=2048, num_heads=16, num_kv_heads=2, intermediate_size=11008,
                                    vocab_size=151936, scene_encoder="query_scene", head="gru", query_tokens=2,
                                    real_size=True, text_tokens=32, head_hidden=1024, num_waypoints=6,
                                    num_cameras=6, lora_rank=16, lora_targets=["q_proj", "k_proj", "v_proj", "o_proj"],
                                    passes=_TINY_SCENE["passes"], scene_config={**_REAL_SCENE, "scene_queries": 512},
                                    notes="MindDrive's shape: 2 passes (LoRA r=16 on q/k/v/o) over Qwen2.5-3B"),
    "internvl3-8b-like": VLASpec(name="internvl3-8b-like", family="internvl", num_blocks=28, hidden_size=3584,
                                 num_heads=28, num_kv_heads=4, intermediate_size=18944, vocab_size=151674,
                                 vision_depth=24, vision_hidden=1024, vision_heads=16, vision_intermediate=4096,
                                 image_height=448, image_width=896, tile_size=448, num_cameras=1, text_tokens=32,
                                 head_hidden=1024, num_waypoints=8, real_size=True,
                                 notes="InternVL3-8B shapes (InternViT-300M, 256 tokens per 448 tile + Qwen2.5-7B "
                                       "blocks), like ReCogDrive; one camera in 2 tiles"),
}


def get_preset(name: str) -> VLASpec:
    expect(name in PRESETS, ConfigError, f"unknown preset '{name}'; known presets: {sorted(PRESETS)}")
    return PRESETS[name]
