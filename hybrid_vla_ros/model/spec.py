"""A VLA's shape as one plain dataclass, and the table of named presets.

A VLA here = an HF transformers vision-language model (the backbone) + a small action head that reads
the final hidden state at the planning query token. The spec fixes every shape, so one spec (plus a seed
or a safetensors file) fully defines a model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..errors import ConfigError, expect
from .registry import SCENE_ENCODERS, family_names, get_family, plugin_class
from .tokenize.tokens import MIN_VOCAB

ACTION_HEADS = ("waypoints", "tokens", "text")
MAX_ANSWER_TOKENS = 1024   # the decode policy's own limit (engine/decode/policy.py MAX_TOKENS)
MAX_WINDOW_FRAMES, MAX_FRAME_STRIDE = 8, 10   # a window: up to 8 frames a camera, up to 1 s apart at 10 Hz
ANSWER_VALUES = (2, 3)   # a text answer's numbers a pose: x, y (AR1) or x, y, heading (NAVSIM)


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
    # Attention width per head; 0: hidden_size / num_heads. Qwen3-VL-32B: 64 heads of 128 over a 5120 hidden (its
    # q_proj 5120 -> 8192), so a spec of its shapes must say it (qwen3_vl only).
    head_dim: int = 0
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
    # History: each camera's last frames_per_camera frames, every frame_stride-th camera frame (oldest first), as
    # image blocks camera-major (engine/pipeline/frame_window.py builds the window; Alpamayo reads 4 per camera).
    frames_per_camera: int = 1
    frame_stride: int = 1
    # Delay-aware (training-time real-time chunking's idea, simplest form): the prompt's instruction is the frame's
    # expected capture-to-effect delay (tokenize/tokens.delay_text), and the plan is the one to follow from the pose
    # the car reaches after that delay, its times from then (learn/train.py max_delay_s trains it so).
    delay_aware: bool = False
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
    # "text" (OneVL): the LLM writes the num_waypoints poses as text over its whole vocabulary through its own LM head,
    # at most answer_tokens tokens, each pose answer_values numbers (model/tokenize/text_waypoints.py).
    answer_tokens: int = 256
    answer_values: int = 3
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
    # Prompt rows that are not vocabulary embeddings (model/prompt_embeddings.py; SimLingo): query_embeddings, learned
    # tables at the query tokens (true: one; a list of group sizes: one per group); prompt_slots, [{"name", "inputs",
    # "hidden"}]: context values through an MLP adaptor into slot tokens placed after the instruction.
    query_embeddings: bool | list = False
    prompt_slots: list = field(default_factory=list)
    notes: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        expect(self.family in family_names(), ConfigError,
               f"spec '{self.name}': family '{self.family}' is not one of {family_names()}")
        for name in ("num_blocks", "hidden_size", "num_heads", "num_kv_heads", "num_cameras",
                     "num_waypoints", "text_tokens", "image_height", "image_width"):
            value = getattr(self, name)
            expect(isinstance(value, int) and value > 0, ConfigError,
                   f"spec '{self.name}': {name}={value!r}, expected a positive integer")
        for name, most in (("frames_per_camera", MAX_WINDOW_FRAMES), ("frame_stride", MAX_FRAME_STRIDE)):
            value = getattr(self, name)
            expect(isinstance(value, int) and 1 <= value <= most, ConfigError,
                   f"spec '{self.name}': {name}={value!r}, expected 1..{most}")
        expect(isinstance(self.head_dim, int) and self.head_dim >= 0 and self.head_dim % 2 == 0, ConfigError,
               f"spec '{self.name}': head_dim={self.head_dim!r}, expected an even width (0: hidden / heads)")
        expect(self.head_dim or self.hidden_size % self.num_heads == 0, ConfigError,
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
        if self.action_head == "text":
            self._check_text_answer()
        from ..context import CONTEXT_PIECES
        expect(isinstance(self.context, list) and all(p in CONTEXT_PIECES for p in self.context), ConfigError,
               f"spec '{self.name}': context={self.context!r}, expected a list of {list(CONTEXT_PIECES)}")
        if self.instruction_template:   # route/ is ROS-free and torch-free: checked here, at load
            from ..route.text import check_template
            check_template(self.instruction_template)
        from .prompt_embeddings import check_prompt_embeddings
        check_prompt_embeddings(self)
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

    def _check_text_answer(self) -> None:
        expect(isinstance(self.answer_tokens, int) and 1 <= self.answer_tokens <= MAX_ANSWER_TOKENS, ConfigError,
               f"spec '{self.name}': answer_tokens={self.answer_tokens!r}, expected 1..{MAX_ANSWER_TOKENS} (the most "
               f"tokens a text answer may take; each KV ring slot holds the prompt and them)")
        expect(self.answer_values in ANSWER_VALUES, ConfigError,
               f"spec '{self.name}': answer_values={self.answer_values!r}, expected one of {ANSWER_VALUES} "
               f"(x, y or x, y, heading a pose)")

    @property
    def image_slots(self) -> int:
        """Images a frame gives the model: every camera's window (num_cameras x frames_per_camera)."""
        return self.num_cameras * self.frames_per_camera

    def window_steps(self, newest: int) -> list[int]:
        """The camera frames a window of frame `newest` reads, oldest first: newest - (K-1)s, ..., newest; before
        frame 0 (a cold start) frame 0 stands in."""
        return [max(0, newest - k * self.frame_stride) for k in reversed(range(self.frames_per_camera))]

    @property
    def attention_head_dim(self) -> int:
        """One attention head's width: head_dim, or hidden_size / num_heads."""
        return self.head_dim or self.hidden_size // self.num_heads

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

    @property
    def slot_tokens(self) -> int:
        """Slot tokens in the prompt: one per input of every prompt slot."""
        return sum(len(slot["inputs"]) for slot in self.prompt_slots)

    def backbone_config(self):
        """The transformers config of the spec's backbone (its family's build_config)."""
        return get_family(self.family).build_config(self)

    def scene_tokens(self) -> int:
        """Scene tokens per frame: the scene encoder plugin's tokens_for(scene_config). The family and the head
        plugins ask the spec: they are entries of the registry's table, which they therefore never import."""
        return plugin_class(SCENE_ENCODERS, self.scene_encoder).tokens_for(self.scene_config)

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
