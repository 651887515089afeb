"""A OneVL release as its authors save it (xiaomi-research/onevl @f4e6f05, infer_onevl.py), served as released: no
conversion. What the directory holds, from their inference code:

    config.json (model_type qwen3_vl), tokenizer + chat template, *.safetensors of their trained
    Qwen3VLForConditionalGeneration (`model.visual.*`, `model.language_model.*`, `lm_head.weight` unless tied),
    and in the same files the training-time modules their inference reads by prefix: `_latent_cot_aux_decoder.*`,
    `_latent_cot_latent_proj.*`, `_latent_cot_visual_aux_decoder.*`, `_latent_cot_visual_latent_proj.*` (decoders
    that explain the latents; discarded for planning) and `_latent_cot_float_head.*` (the MLP-head variant).

Those `_latent_cot_` keys are what marks a OneVL release. The plan is the text the LLM writes after the prompt
`template + <|start-latent-vis|><|latent-vis|> x4 <|end-latent-vis|><|start-latent|><|latent|> x2 <|end-latent|>
<answer>` + the answer prefix: the latents are plain text tokens prefilled with the prompt, so the model here is the
Qwen3-VL backbone with its LM head as a text head (spec action_head "text"), decoded greedily (their `generate`,
do_sample False) across the cut by ActionFlow's packed engine. The explaining decoders and the float head are not
read (listed by `unserved_modules`).

The release says nothing about the cameras, image size or the instruction a deployment uses. The cameras, sizes and
answer default to the authors' NAVSIM run (one front camera at 1920 x 1088, what their processor makes of NAVSIM's
1920 x 1080 images; 8 poses x, y, heading at 0.5 s; the answer prefix `[`); a deployment states its own in
`onevl_serving.json` beside the weights (SERVING_FIELDS; the file is ours, the release stays untouched), and must
state the instruction: their NAVSIM prompt (output/navsim_mlp/navsim_results.json in their repository) is written per
frame, " is the front view. Command: MOVE FORWARD. Velocity: [vx, vy]. Acceleration: [ax, ay]. Historical
trajectory: [[x, y, h] x 3]. Output the reasoning in <think></think> ...", its length changing with the numbers,
and prompts of changing length are not served here (the packed KV ring's slots take every frame at one length): a
fixed instruction is what this package serves, so there is no default that would pass for theirs.
"""

from __future__ import annotations

import json
from pathlib import Path

from ...errors import ConfigError, expect

LATENT_PREFIX = "_latent_cot_"
SERVING_FILE = "onevl_serving.json"
# ROADWork's instruction in their test set (test_data/roadwork_test.json), the tiny release's: a fixed one
INSTRUCTION = "Based on the current image, predict the future drivable pathway for the ego vehicle."
# their NAVSIM answers run to ~150 tokens of Qwen's (8 poses, 2 decimals); 256 leaves room for long plans and signs
NAVSIM = {"num_cameras": 1, "image_height": 1088, "image_width": 1920, "num_waypoints": 8, "waypoint_dt_s": 0.5,
          "answer_values": 3, "answer_tokens": 256, "answer_prefix": "[", "visual_latents": 4, "text_latents": 2}
SERVING_FIELDS = ("instruction", *NAVSIM)
MAX_LATENTS = 64
SPEC_FIELDS = ("num_cameras", "image_height", "image_width", "num_waypoints", "waypoint_dt_s", "answer_values",
               "answer_tokens")
EMBED_KEY = "model.language_model.embed_tokens.weight"
LM_HEAD_KEY = "lm_head.weight"


def _weight_keys(directory: Path) -> list[str]:
    from ..checkpoint_files import _weight_map
    return list(_weight_map(directory))


def is_release(directory) -> bool:
    """A directory holding a OneVL release as its authors save it: a transformers VLM's config.json (theirs is
    Qwen3-VL's; the backbone family follows from it as for any checkpoint) and `_latent_cot_` keys."""
    directory = Path(directory)
    config = directory / "config.json"
    if not directory.is_dir() or not config.is_file() or (directory / "action_head.safetensors").exists():
        return False
    try:
        return any(k.startswith(LATENT_PREFIX) for k in _weight_keys(directory))
    except ConfigError:
        return False


def serving_fields(directory: Path) -> dict:
    """NAVSIM's defaults, each replaced by the deployment's `onevl_serving.json` where it names one; the instruction
    it must name (module docstring)."""
    path = directory / SERVING_FILE
    expect(path.is_file(), ConfigError,
           f"OneVL release '{directory}': no {SERVING_FILE} beside the weights; it must state at least the prompt's "
           f"'instruction' (one fixed text: their NAVSIM prompt is written per frame from the ego state and is not "
           f"served; the model's docstring, model/plugins/onevl.py)")
    try:
        given = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"'{path}': not JSON ({exc})") from exc
    expect(isinstance(given, dict), ConfigError, f"'{path}': expected a JSON object of {list(SERVING_FIELDS)}")
    unknown = sorted(set(given) - set(SERVING_FIELDS))
    expect(not unknown, ConfigError, f"'{path}': unknown fields {unknown}; known: {list(SERVING_FIELDS)}")
    expect(isinstance(given.get("instruction"), str) and given["instruction"].strip(), ConfigError,
           f"'{path}': 'instruction' must be the prompt's text (a non-empty string)")
    for name, value in given.items():
        default = NAVSIM.get(name, "")
        expect(type(value) is type(default) or (isinstance(default, float) and type(value) is int),
               ConfigError, f"'{path}': {name}={value!r}, expected a {type(default).__name__}")
    fields = {**NAVSIM, **given}
    for name in ("visual_latents", "text_latents"):
        expect(0 <= fields[name] <= MAX_LATENTS, ConfigError,
               f"'{path}': {name}={fields[name]}, expected 0..{MAX_LATENTS} (their inference: 4 visual, 2 text)")
    expect(not set("<>") & set(fields["answer_prefix"]), ConfigError,
           f"'{path}': answer_prefix={fields['answer_prefix']!r}: the text the answer opens with after <answer> "
           f"(NAVSIM's '['), without '<' or '>'")
    return fields


def assistant_prefix(fields: dict) -> str:
    """What their inference appends after the chat template (infer_onevl.py `latent_block`)."""
    visual = ("<|start-latent-vis|>" + "<|latent-vis|>" * fields["visual_latents"] + "<|end-latent-vis|>"
              if fields["visual_latents"] > 0 else "")
    return (visual + "<|start-latent|>" + "<|latent|>" * fields["text_latents"] + "<|end-latent|><answer>" +
            fields["answer_prefix"])


def lm_head_key(files) -> str:
    """The checkpoint key of the LM head: its own `lm_head.weight`, or the token embeddings when tied."""
    if LM_HEAD_KEY in files.weight_map:
        return LM_HEAD_KEY
    tied = getattr(files.config, "tie_word_embeddings", None)
    if tied is None:
        tied = getattr(files.config.get_text_config(), "tie_word_embeddings", False)
    expect(bool(tied) and EMBED_KEY in files.weight_map, ConfigError,
           f"OneVL release '{files.directory}': no {LM_HEAD_KEY} and the config does not tie it to {EMBED_KEY}")
    return EMBED_KEY


def unserved_modules(weight_keys) -> list[str]:
    """The training-time modules of the release that planning does not read (`_latent_cot_<name>`)."""
    return sorted({k[len(LATENT_PREFIX):].split(".")[0] for k in weight_keys if k.startswith(LATENT_PREFIX)})


def load_release(directory, dtype, keep=None, shapes_only: bool = False):
    """The release as a VLAModel with a text head; keep(model) -> the modules to read now (as load_checkpoint)."""
    from transformers import AutoTokenizer

    from ..checkpoint import load_checkpoint
    from ..tokenize.chat_prompt import ChatPrompt
    directory = Path(directory)
    fields = serving_fields(directory)
    source = f"OneVL release '{directory}'"
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise ConfigError(f"{source}: its tokenizer cannot be loaded ({exc})") from exc
    vla = {"name": directory.name, "action_head": "text", **{k: fields[k] for k in SPEC_FIELDS}}

    def prompt(family, config):
        return ChatPrompt(tokenizer, family, config, fields["instruction"], assistant_prefix(fields), source)
    return load_checkpoint(directory, dtype, keep=(lambda m: []) if shapes_only else keep,
                           release=(vla, prompt, lm_head_key))
