"""An Alpamayo release's config.json (model_type `alpamayo_r1` or `alpamayo1_5`) -> the configs of its parts:
the Qwen3-VL VLM (from `vlm_name_or_path`: a local directory, or the released backbone's shapes shipped here),
the expert (a copy of the VLM's text config with `expert_cfg` set on it), the action space, the flow sampler,
the history tokenizer. Offline: nothing is fetched. Field names and defaults as in the published code
(alpamayo_r1/config.py, models/base_model.py ReasoningVLAConfig, alpamayo1_5/config.py)."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path

from ....errors import ConfigError, expect
from .config_super import MODEL_TYPE, as_release_fields, vlm_of

RELEASES = {"alpamayo_r1": "Alpamayo 1 (R1)", "alpamayo1_5": "Alpamayo 1.5", "alpamayo2_super": "Alpamayo 2 Super"}
QWEN3_VL_8B = "Qwen/Qwen3-VL-8B-Instruct"
# The backbones the releases name, all Qwen3-VL-8B shaped (Cosmos-Reason2-8B is a fine-tune of it).
KNOWN_VLMS = (QWEN3_VL_8B, "nvidia/Cosmos-Reason2-8B", "nvidia/Cosmos-Reason1-7B")
QWEN3_VL_8B_TEXT = dict(hidden_size=4096, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
                        head_dim=128, intermediate_size=12288, vocab_size=151936, rms_norm_eps=1e-6,
                        max_position_embeddings=262144,
                        rope_parameters={"rope_type": "default", "rope_theta": 5_000_000.0,
                                         "mrope_interleaved": True, "mrope_section": [24, 20, 20]})
QWEN3_VL_8B_VISION = dict(depth=27, hidden_size=1152, intermediate_size=4304, num_heads=16, patch_size=16,
                          spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=4096,
                          num_position_embeddings=2304, deepstack_visual_indexes=[8, 16, 24])
TRAJ_TOKENS = ("history", "future", "history_start", "future_start", "history_end", "future_end")
# With add_special_tokens, the tokenizer gets <i0> .. <iN-1> then these, in this order (base_model.py
# SPECIAL_TOKENS_KEYS): their ids follow from traj_token_start_idx and traj_vocab_size (and _special_ids).
SPECIAL_KEYS = ("prompt_start", "prompt_end", "image_start", "image_pre_tkn", "image_end", "traj_history_start",
                "traj_history_pre_tkn", "traj_history_end", "cot_start", "cot_end", "meta_action_start",
                "meta_action_end", "traj_future_start", "traj_future_pre_tkn", "traj_future_end", "traj_history",
                "traj_future", "image_pad", "vectorized_wm", "vectorized_wm_start", "vectorized_wm_end",
                "vectorized_wm_pre_tkn", "route_start", "route_pad", "route_end", "question_start", "question_end",
                "answer_start", "answer_end")
# Alpamayo 1.5 names the unused ones <|_padding_0|> .. <|_padding_8|> (alpamayo1_5 base_model.py), at these places
PADDED_1_5 = ("image_pre_tkn", "traj_history_pre_tkn", "meta_action_start", "meta_action_end", "traj_future_pre_tkn",
              "vectorized_wm", "vectorized_wm_start", "vectorized_wm_end", "vectorized_wm_pre_tkn")


@dataclass(frozen=True)
class AlpamayoConfig:
    """Everything one release needs at inference, checked."""
    model_type: str
    vlm: object                  # transformers Qwen3VLConfig (text vocab = the release's vocab_size)
    expert: object               # transformers Qwen3VLTextConfig of the expert
    vocab_size: int
    traj_token_start_idx: int    # id of <i0>; [start, start + traj_vocab_size) never sampled
    traj_vocab_size: int
    traj_token_ids: dict         # history / future / *_start / *_end -> id
    special_ids: dict            # cot_start, route_start, ... -> id (those the config names)
    hist_token_start_idx: int
    history: dict                # DeltaTrajectoryTokenizer: num_bins, ego_xyz_min, ego_xyz_max
    action_space: dict           # UnicycleAccelCurvatureActionSpace fields
    in_proj: dict                # PerWaypointActionInProjV2 fields
    flow: dict                   # FlowMatching: num_inference_steps, inference_guidance_weight, ...
    tokens_per_future_traj: int = 64
    non_causal: bool = True
    raw: dict = field(default_factory=dict, repr=False)
    masked_ids: tuple = ()       # never sampled besides the <iN> (Alpamayo 2 Super: the text EOS ids)

    @property
    def banned(self) -> tuple[tuple[int, int], ...]:
        """The id spans [lo, hi) the reasoning never samples: every <iN>, and masked_ids."""
        start = self.traj_token_start_idx
        return ((start, start + self.traj_vocab_size), *((i, i + 1) for i in self.masked_ids))

    @property
    def n_waypoints(self) -> int:
        return int(self.action_space.get("n_waypoints", 64))

    @property
    def release(self) -> str:
        return RELEASES[self.model_type]

    @property
    def cameras(self) -> int:
        """Camera slots of a frame: Alpamayo 2 Super's trajectory profile 6 (input_profiles.py: IDs 0, 1, 2, 3, 5, 6),
        Alpamayo 1 / 1.5's 4 (0, 1, 2, 6); each with 4 frames."""
        return 6 if self.model_type == MODEL_TYPE else 4

    @property
    def history_tokens(self) -> int:
        """The prompt's `<|traj_history|>` pads: 3 per encoded step of the 16 poses (15 without the origin pad)."""
        return 3 * (16 if self.history.get("pad_origin_at_beginning", True) else 15)

    @property
    def opens_reasoning(self) -> bool:
        """The prompt ends with `<|cot_start|>` (Alpamayo 1 / 1.5's continue_final_message); Alpamayo 2 Super's
        ends where the assistant's turn opens (its generation prompt)."""
        return self.model_type != MODEL_TYPE and "cot_start" in self.special_ids


def read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"'{path}': not a readable JSON file ({exc})") from exc
    expect(isinstance(data, dict), ConfigError, f"'{path}': expected a JSON object")
    return data


def is_release(directory) -> bool:
    """A directory whose config.json names an Alpamayo release."""
    path = Path(directory) / "config.json"
    if not path.is_file():
        return False
    try:
        return json.loads(path.read_text()).get("model_type") in RELEASES
    except (OSError, json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        return False


def _strip(cfg) -> dict:
    """A hydra `_target_` dict -> its plain fields."""
    return {k: v for k, v in (cfg or {}).items() if not k.startswith("_")}


def special_tokens(model_type: str) -> dict:
    """SPECIAL_KEYS -> the token text the release adds at that place (`<|key|>`; 1.5's `<|_padding_i|>`)."""
    padded = {key: f"_padding_{i}" for i, key in enumerate(PADDED_1_5)} if model_type == "alpamayo1_5" else {}
    return {key: f"<|{padded.get(key, key)}|>" for key in SPECIAL_KEYS}


def vlm_directory(raw: dict, directory: Path | None) -> Path | None:
    """`vlm_name_or_path` as a local directory with a config.json (relative to the release or absolute)."""
    name = raw.get("vlm_name_or_path") or QWEN3_VL_8B
    local = [p for p in ((directory / name) if directory else None, Path(name)) if p and (p / "config.json").is_file()]
    return local[0] if local else None


def vlm_config(raw: dict, directory: Path | None, config=None):
    """The VLM's Qwen3VLConfig: `config` when given (a preset's), else from vlm_directory, else one of the known
    backbones' shapes; its text vocab set to the release's vocab_size."""
    from transformers.models.qwen3_vl import Qwen3VLConfig
    name, local = raw.get("vlm_name_or_path") or QWEN3_VL_8B, vlm_directory(raw, directory)
    if config is not None:
        config = copy.deepcopy(config)
    elif local:
        config = Qwen3VLConfig.from_pretrained(str(local), local_files_only=True)
    else:
        expect(name in KNOWN_VLMS, ConfigError,
               f"vlm_name_or_path {name!r}: no such local directory with a config.json, and not one of the known "
               f"backbones {list(KNOWN_VLMS)} (nothing is downloaded; put the backbone's config.json there)")
        config = Qwen3VLConfig(text_config=QWEN3_VL_8B_TEXT, vision_config=QWEN3_VL_8B_VISION)
    vocab = int(raw.get("vocab_size") or config.text_config.vocab_size)
    config.text_config.vocab_size = vocab
    config.vocab_size = vocab
    config._attn_implementation = "sdpa"
    config.text_config._attn_implementation = "sdpa"
    config.vision_config._attn_implementation = "sdpa"
    return config


def expert_config(text_config, overrides: dict):
    """A deep copy of the VLM's text config with `expert_cfg` set on it (alpamayo_r1.py __init__); its layer i
    appends to the VLM's layer-i cache, so layers, KV heads and head_dim must allow that."""
    expert = copy.deepcopy(text_config)
    for key, value in (overrides or {}).items():
        setattr(expert, key, value)
    expert._attn_implementation = "sdpa"   # 1.5 forces sdpa for the expert; eager/sdpa both read a 4D mask
    for name in ("num_key_value_heads", "head_dim"):
        expect(getattr(expert, name) == getattr(text_config, name), ConfigError,
               f"expert_cfg: {name}={getattr(expert, name)} but the VLM's is {getattr(text_config, name)}: the "
               f"expert's layer i attends to the VLM's layer-i keys/values")
    expect(expert.num_hidden_layers <= text_config.num_hidden_layers, ConfigError,
           f"expert_cfg: {expert.num_hidden_layers} layers, the VLM has {text_config.num_hidden_layers}")
    return expert


def _special_ids(raw: dict, image_token_id: int) -> dict:
    """The ids add_special_tokens gives SPECIAL_KEYS after <i0> .. <iN-1>. A token the base vocabulary already
    holds keeps its id and takes no new one (a tokenizer's add_tokens): Qwen3-VL's <|image_pad|> (the backbone's
    image_token_id), told by vocab_size: 28 added tokens instead of 29, the ids after it one lower. Alpamayo 2 Super
    pads its vocabulary to 128, so there the backbone's image token lying below <i0> tells it."""
    first = int(raw["traj_token_start_idx"]) + int(raw["traj_vocab_size"])
    reused = int(image_token_id) < int(raw["traj_token_start_idx"]) if raw.get("model_type") == MODEL_TYPE else \
        int(raw["vocab_size"]) - first == len(SPECIAL_KEYS) - 1
    keys = [k for k in SPECIAL_KEYS if not (reused and k == "image_pad")]
    special = {k: first + i for i, k in enumerate(keys)}
    if reused:
        special["image_pad"] = int(image_token_id)
    return special


def _token_ids(raw: dict, image_token_id: int) -> tuple[dict, dict]:
    ids = raw.get("traj_token_ids") or {}
    missing = [k for k in TRAJ_TOKENS if not isinstance(ids.get(k), int)]
    expect(not missing, ConfigError, f"config.json: traj_token_ids lacks {missing} (the release saves them)")
    traj = {k: int(ids[k]) for k in TRAJ_TOKENS}
    if not raw.get("add_special_tokens"):
        return traj, {}
    special = _special_ids(raw, image_token_id)
    expect(special["traj_future_start"] == traj["future_start"], ConfigError,
           f"config.json: traj_token_ids.future_start={traj['future_start']}, but add_special_tokens puts "
           f"<|traj_future_start|> at {special['traj_future_start']} (<i0> + traj_vocab_size + 12)")
    return traj, special


def _hist_start(raw: dict) -> int:
    """hist_token_start_idx (base_model.py _initialize_trajectory_tokenizers): <i0>, moved past the future
    tokenizer's bins when both tokenizers are configured (Alpamayo 2 Super: <i0>, its history vocabulary first)."""
    if raw.get("model_type") == MODEL_TYPE:
        return int(raw["hist_token_start_idx"])
    start = int(raw["traj_token_start_idx"])
    if raw.get("hist_traj_tokenizer_cfg") and raw.get("traj_tokenizer_cfg"):
        start += int(raw["traj_tokenizer_cfg"].get("num_bins", 0))
    return start


def _history(raw: dict) -> dict:
    cfg = _strip(raw.get("hist_traj_tokenizer_cfg"))
    expect(not cfg.get("predict_yaw", False), ConfigError,
           "hist_traj_tokenizer_cfg: predict_yaw (a fourth, yaw token per step) is not built here; the releases "
           "read here encode x, y, z")
    return {"num_bins": int(cfg.get("num_bins", 1000)), "ego_xyz_min": list(cfg.get("ego_xyz_min", (-4, -4, -10))),
            "ego_xyz_max": list(cfg.get("ego_xyz_max", (4, 4, 10))),
            "pad_origin_at_beginning": bool(cfg.get("pad_origin_at_beginning", True))}


def parse(raw: dict, directory: Path | None = None, vlm=None) -> AlpamayoConfig:
    """config.json's dict -> AlpamayoConfig, or ConfigError naming the field. vlm: the backbone's Qwen3VLConfig
    (a preset's; default: from vlm_name_or_path)."""
    where = f"'{directory / 'config.json'}'" if directory else "config"
    model_type = raw.get("model_type")
    expect(model_type in RELEASES, ConfigError, f"{where}: model_type {model_type!r} is not one of {list(RELEASES)}")
    if model_type == MODEL_TYPE:   # its own field names, read into Alpamayo 1's (config_super.py)
        raw, vlm = as_release_fields(raw, where), vlm if vlm is not None else vlm_of(raw, where)
    for name in ("traj_token_start_idx", "traj_vocab_size", "vocab_size"):
        expect(isinstance(raw.get(name), int) and raw[name] > 0, ConfigError,
               f"{where}: {name}={raw.get(name)!r}, expected a positive integer (the release saves it)")
    vlm = vlm_config(raw, directory, vlm)
    traj_ids, special = _token_ids(raw, vlm.image_token_id)
    expect(bool(raw.get("expert_non_causal_attention", True)), ConfigError,
           f"{where}: expert_non_causal_attention is false: a causal mask among the action tokens is not built here "
           f"(the releases read here attend both ways)")
    return AlpamayoConfig(
        model_type=model_type, vlm=vlm, expert=expert_config(vlm.text_config, raw.get("expert_cfg")),
        vocab_size=int(raw["vocab_size"]), traj_token_start_idx=int(raw["traj_token_start_idx"]),
        traj_vocab_size=int(raw["traj_vocab_size"]), traj_token_ids=traj_ids, special_ids=special,
        hist_token_start_idx=_hist_start(raw), history=_history(raw),
        action_space=_strip(raw.get("action_space_cfg")), in_proj=_strip(raw.get("action_in_proj_cfg")),
        flow=_strip(raw.get("diffusion_cfg")),
        tokens_per_future_traj=int(raw.get("tokens_per_future_traj", 64)),
        non_causal=bool(raw.get("expert_non_causal_attention", True)), raw=raw,
        masked_ids=tuple(raw.get("masked_ids", ())))


def check_guidance(config: AlpamayoConfig) -> None:
    """Classifier-free guidance needs route tokens, and Alpamayo 2 Super has none in its prompts: its ExpertModel
    refuses classifier-free guidance (models/expert.py) and its route is plain text."""
    expect(config.model_type != MODEL_TYPE, ConfigError,
           "guidance: Alpamayo 2 Super's inference has no classifier-free guidance (its ExpertModel refuses it and "
           "its prompt carries the route as plain text); run it with guidance off")
    expect("route_start" in config.special_ids, ConfigError,
           f"guidance: the {config.release} config has no route tokens (add_special_tokens is off)")
