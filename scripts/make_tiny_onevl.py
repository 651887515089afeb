#!/usr/bin/env python3
"""A tiny OneVL release in the layout its authors' code saves (xiaomi-research/onevl @f4e6f05, infer_onevl.py), trained
here to write one plan as text, for the package's tests (test/test_onevl.py) and `hybrid-vla verify --checkpoint`.

    .venv/bin/python scripts/make_tiny_onevl.py test/data/onevl_tiny

What is theirs: the module tree (transformers' Qwen3VLForConditionalGeneration, the class their inference loads, its
LM head tied to the token embeddings as Qwen3-VL-4B's is, saved by its own save_pretrained), the training-time
modules their inference reads by prefix from the same safetensors (`_latent_cot_aux_decoder.` a Qwen3-VL, the two
latent projections Linear-GELU-Linear-LayerNorm, the MLP float head: infer_onevl.py's shapes), the prompt (the chat
template with the images first, then their latent block and `<answer>[`), and the answer (NAVSIM's `[x, y, h], ...`
poses closed by `</answer>` and the end of turn).
What is ours: the sizes (a 4-block 64-wide Qwen3-VL, one 64 x 64 camera), a byte-level BPE tokenizer trained here on
prompt and answer text with Qwen's special tokens, a chat template written here that renders a user turn as Qwen's
does (an image item as <|vision_start|><|image_pad|><|vision_end|>), `onevl_serving.json` (the deployment's camera
size), and the training: a few hundred Adam steps teaching the model to write PLAN after the prompt on seeded frames.
It proves the plumbing (a text plan decoded across the cut, read back into waypoints), not driving.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
            "<|video_pad|>"]
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message.role + '\\n' }}"
    "{%- if message.content is string -%}{{ message.content }}"
    "{%- else -%}{%- for item in message.content -%}"
    "{%- if item.type == 'image' -%}{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif item.type == 'text' -%}{{ item.text }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}")
SERVING = {"image_height": 64, "image_width": 64}   # with ROADWork's instruction (onevl.py INSTRUCTION)
PLAN = [[3.0 * (i + 1), 0.04 * (i + 1) ** 2, math.atan2(0.08 * (i + 1), 3.0)] for i in range(8)]
VOCAB, SEED, STEPS, FRAMES = 512, 55, 400, 6


def corpus(instruction: str) -> list[str]:
    import random
    rng = random.Random(SEED)
    from hybrid_vla_ros.model.tokenize.text_waypoints import format_poses
    answers = [format_poses([[rng.uniform(-5, 40), rng.uniform(-9, 9), rng.uniform(-1, 1)] for _ in range(8)])
               for _ in range(200)]
    latent = "<|start-latent-vis|><|latent-vis|><|end-latent-vis|><|start-latent|><|latent|><|end-latent|>"
    return [instruction, latent, "user\nassistant\n", *(f"<answer>[{a}]</answer>" for a in answers)]


def build_tokenizer(instruction: str, out: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - 16, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(instruction) * 4, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out))
    return fast


def authors_model(tokenizer):
    """Their class at our tiny sizes, the special ids the tokenizer's, the head tied (Qwen3-VL-4B's)."""
    from transformers import Qwen3VLForConditionalGeneration
    from hybrid_vla_ros.model.presets import _QWEN3_TINY, _TINY
    from hybrid_vla_ros.model.spec import VLASpec
    spec = VLASpec(name="onevl-tiny", family="qwen3_vl", **{**_TINY, **_QWEN3_TINY, "num_cameras": 1},
                   vocab_size=VOCAB)
    config = spec.backbone_config()
    ids = {name: tokenizer.convert_tokens_to_ids(token) for name, token in (
        ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>"))}
    for name, value in ids.items():
        setattr(config, name, value)
    config.text_config.bos_token_id = None
    config.text_config.eos_token_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    config.text_config.pad_token_id = tokenizer.pad_token_id
    config.tie_word_embeddings = True
    torch.manual_seed(SEED)
    return Qwen3VLForConditionalGeneration(config), config


def training_examples(out: Path, tokenizer) -> list[dict]:
    """Seeded frames through the package's own release reader (the prompt and pixels it serves), + PLAN."""
    from hybrid_vla_ros.model.inputs import encode_frame, synthetic_frame
    from hybrid_vla_ros.model.load import load_vla
    from hybrid_vla_ros.model.tokenize.text_waypoints import format_poses
    served = load_vla(checkpoint=str(out))
    answer = tokenizer.encode(format_poses(PLAN)[1:] + "</answer>", add_special_tokens=False)
    answer.append(tokenizer.convert_tokens_to_ids("<|im_end|>"))
    examples = []
    for seq in range(FRAMES):
        encoded = encode_frame(synthetic_frame(served.spec, seq, seed=SEED), served)
        ids = torch.cat([encoded.input_ids, torch.tensor([answer])], dim=1)
        labels = ids.clone()
        labels[:, :encoded.input_ids.shape[1]] = -100
        mm = torch.cat([encoded.mm_token_type_ids, torch.zeros(1, len(answer), dtype=torch.int32)], dim=1)
        examples.append({"input_ids": ids, "labels": labels, "mm_token_type_ids": mm, **encoded.pixels})
    return examples


def train(model, examples) -> float:
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    loss = torch.tensor(0.0)
    for step in range(STEPS):
        loss = model(**examples[step % len(examples)]).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    return float(loss.detach())


def attach_training_modules(model, config) -> None:
    """The modules their training adds, saved in the same files (infer_onevl.py reads them by these prefixes)."""
    from transformers import Qwen3VLForConditionalGeneration
    hidden = config.text_config.hidden_size
    aux_config = config.__class__.from_dict(config.to_dict())
    aux_config.tie_word_embeddings = False
    aux_config.text_config.num_hidden_layers = 1   # its size is not read here: one block keeps the file small
    def projection():
        return nn.Sequential(nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.LayerNorm(hidden))
    model._latent_cot_aux_decoder = Qwen3VLForConditionalGeneration(aux_config)
    model._latent_cot_latent_proj = projection()
    model._latent_cot_visual_latent_proj = projection()
    model._latent_cot_float_head = nn.Module()
    model._latent_cot_float_head.net = nn.Sequential(nn.Linear(hidden, hidden), nn.GELU(),
                                                     nn.Linear(hidden, hidden // 2), nn.GELU(),
                                                     nn.Linear(hidden // 2, 24))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    out = parser.parse_args().out
    from hybrid_vla_ros.model.plugins.onevl import INSTRUCTION, LATENT_PREFIX
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    tokenizer = build_tokenizer(INSTRUCTION, out)
    model, config = authors_model(tokenizer)
    (out / "onevl_serving.json").write_text(json.dumps({"instruction": INSTRUCTION, **SERVING}, indent=1) + "\n")
    marker = {LATENT_PREFIX + "latent_proj.0.bias": torch.zeros(1)}   # marks the untrained copy a release
    model.save_pretrained(str(out))
    from safetensors.torch import load_file, save_file
    save_file({**load_file(str(out / "model.safetensors")), **marker}, str(out / "model.safetensors"),
              metadata={"format": "pt"})
    loss = train(model, training_examples(out, tokenizer))
    attach_training_modules(model, config)
    with torch.random.fork_rng():
        torch.manual_seed(SEED + 1)
        for name, p in model.named_parameters():
            if name.startswith(LATENT_PREFIX):
                nn.init.normal_(p, std=0.02)
    model.save_pretrained(str(out))
    print(f"wrote {out}: final loss {loss:.4f}")


if __name__ == "__main__":
    main()
