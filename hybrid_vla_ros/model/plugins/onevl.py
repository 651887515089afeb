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

The release says nothing about the cameras, image size or the instruction a deployment uses: they default to the
authors' NAVSIM run (one front camera at 1920 x 1088, what their processor makes of NAVSIM's 1920 x 1080 images; 8
poses x, y, heading at 0.5 s; the answer prefix `[`) and a deployment states its own in `onevl_serving.json` beside
the weights (SERVING_FIELDS; the file is ours, the release stays untouched).
"""

from __future__ import annotations

import json
from pathlib import Path

from ...errors import ConfigError, expect

LATENT_PREFIX = "_latent_cot_"
SERVING_FILE = "onevl_serving.json"
# The NAVSIM instruction itself is in their test set, which their repository holds as a Git LFS pointer only: this
# is the one their other sets (ROADWork, AR1) open with.
INSTRUCTION = "Based on the current image, predict the future drivable pathway for the ego vehicle."
NAVSIM = {"num_cameras": 1, "image_height": 1088, "image_width": 1920, "num_waypoints": 8, "waypoint_dt_s": 0.5,
          "answer_values": 3, "answer_tokens": 160, "instruction": INSTRUCTION, "answer_prefix": "[",
          "visual_latents": 4, "text_latents": 2}
SERVING_FIELDS = tuple(NAVSIM)
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
    """NAVSIM's defaults, each replaced by the deployment's `onevl_serving.json` where it names one."""
    path = directory / SERVING_FILE
    if not path.is_file():
        return dict(NAVSIM)
    try:
        given = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"'{path}': not JSON ({exc})") from exc
    expect(isinstance(given, dict), ConfigError, f"'{path}': expected a JSON object of {list(SERVING_FIELDS)}")
    unknown = sorted(set(given) - set(SERVING_FIELDS))
    expect(not unknown, ConfigError, f"'{path}': unknown fields {unknown}; known: {list(SERVING_FIELDS)}")
    for name, value in given.items():
        expect(type(value) is type(NAVSIM[name]) or (isinstance(NAVSIM[name], float) and type(value) is int),
               ConfigError, f"'{path}': {name}={value!r}, expected a {type(NAVSIM[name]).__name__}")
    return {**NAVSIM, **given}


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
