"""Checkpoints that bring their own tokenizer: the prompt is tokenized with it, image tokens are laid out the
way the family's processor does it with the ids of the checkpoint's config, the planning query token is the
one the head's metadata names, and split == HF's own forward at every partition."""

import json

import pytest
from safetensors import safe_open
from safetensors.torch import save_file

from hybrid_vla_ros.engine.verify import verify_partitions
from hybrid_vla_ros.errors import ConfigError
from hybrid_vla_ros.model.checkpoint import HEAD_FILE, load_checkpoint, save_checkpoint
from hybrid_vla_ros.model.inputs import encode_frame, synthetic_frame
from hybrid_vla_ros.model.load import load_vla
from hybrid_vla_ros.model.tokenize.prompt import TokenizerPrompt

SPECIALS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|plan|>", "<image>", "<img>", "</img>",
            "<IMG_CONTEXT>"]
TOKEN_KEYS = {"qwen2_vl": {"image_token_id": "<|image_pad|>", "vision_start_token_id": "<|vision_start|>",
                           "vision_end_token_id": "<|vision_end|>"},
              "llava": {"image_token_id": "<image>", "image_token_index": "<image>"},
              "internvl": {"image_token_id": "<IMG_CONTEXT>"}}
# preset -> a camera's image block as the family's processor lays it out: (start or None, image token, end or None)
IMAGE_BLOCKS = {"tiny": ("<|vision_start|>", "<|image_pad|>", "<|vision_end|>"), "tiny-llava": (None, "<image>", None),
                "tiny-internvl": ("<img>", "<IMG_CONTEXT>", "</img>"),
                "tiny-qwen3vl": ("<|vision_start|>", "<|image_pad|>", "<|vision_end|>")}


def byte_level_tokenizer(specials=SPECIALS, **named):
    """A byte-level BPE tokenizer with no merges (every byte one token) and the specials, built offline.
    named: tokens the tokenizer names as attributes (InternVL's start_image_token, end_image_token)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=list(specials), **named)


def set_head_metadata(directory, **changes):
    with safe_open(str(directory / HEAD_FILE), "pt") as handle:
        tensors, meta = {k: handle.get_tensor(k) for k in handle.keys()}, handle.metadata()
    vla = {k: v for k, v in {**json.loads(meta["hybrid_vla"]), **changes}.items() if v is not None}
    save_file(tensors, str(directory / HEAD_FILE), metadata={**meta, "hybrid_vla": json.dumps(vla)})


def with_own_tokenizer(directory, preset, plan_token="<|plan|>", tokenizer=None):
    """A preset exported, then given a tokenizer whose special ids differ from the built-in layout's."""
    save_checkpoint(load_vla(preset=preset), directory)
    tokenizer = tokenizer or byte_level_tokenizer()
    tokenizer.save_pretrained(directory)
    config = json.loads((directory / "config.json").read_text())
    for key, token in TOKEN_KEYS.get(config["model_type"], TOKEN_KEYS["qwen2_vl"]).items():
        if key in config or key == "image_token_id":
            config[key] = tokenizer.convert_tokens_to_ids(token)
    (directory / "config.json").write_text(json.dumps(config))
    set_head_metadata(directory, plan_token=plan_token)
    return tokenizer


def image_block(tokenizer, preset, n):
    start, image, end = (None if t is None else tokenizer.convert_tokens_to_ids(t) for t in IMAGE_BLOCKS[preset])
    return ([start] if start is not None else []) + [image] * n + ([end] if end is not None else [])


@pytest.mark.parametrize("preset", list(IMAGE_BLOCKS))
def test_a_checkpoint_with_its_own_tokenizer_is_prompted_with_it_and_splits_exactly(tmp_path, preset):
    tokenizer = with_own_tokenizer(tmp_path, preset)
    model = load_checkpoint(tmp_path)
    assert isinstance(model.prompt, TokenizerPrompt)
    ids = encode_frame(synthetic_frame(model.spec, 0), model).input_ids[0].tolist()
    n = model.family.image_tokens_per_camera(model.spec)
    image_id = tokenizer.convert_tokens_to_ids(IMAGE_BLOCKS[preset][1])
    assert ids.count(image_id) == model.spec.num_cameras * n and image_id >= 256  # not the built-in id 2
    block = image_block(tokenizer, preset, n)
    assert ids[:len(block) * model.spec.num_cameras] == block * model.spec.num_cameras  # every camera's block
    assert ids[-1] == tokenizer.convert_tokens_to_ids("<|plan|>")
    assert len(ids) == model.prompt.sequence_length(model.spec.num_cameras, n, model.spec.text_tokens)
    text = tokenizer.decode(ids[-1 - 16 - model.spec.text_tokens:-1 - 16]).replace("<|endoftext|>", "")
    assert text == synthetic_frame(model.spec, 0).instruction[:model.spec.text_tokens]
    # 0.0: split vs HF's forward: same kernels, same inputs, one thread (test_partition.py, EXACT)
    assert verify_partitions(model)["max_abs_diff"] <= (0.0 if preset in ("tiny-internvl", "tiny-qwen3vl") else 1e-6)


def test_export_keeps_the_tokenizer_and_its_query_token(tmp_path):
    with_own_tokenizer(tmp_path / "a", "tiny")
    save_checkpoint(load_checkpoint(tmp_path / "a"), tmp_path / "b")
    again = load_checkpoint(tmp_path / "b")
    assert isinstance(again.prompt, TokenizerPrompt) and again.prompt.plan_token == "<|plan|>"


def test_a_tokenizer_without_a_named_query_token_or_with_an_unknown_one_is_refused(tmp_path):
    with_own_tokenizer(tmp_path, "tiny", plan_token=None)
    with pytest.raises(ConfigError, match="must name the planning query token"):
        load_checkpoint(tmp_path)
    set_head_metadata(tmp_path, plan_token="<|not_there|>")
    with pytest.raises(ConfigError, match=r"plan_token .* '<\|not_there\|>' is not a token of the checkpoint's"):
        load_checkpoint(tmp_path)


def test_other_special_ids_without_a_tokenizer_are_refused(tmp_path):
    with_own_tokenizer(tmp_path, "tiny")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).unlink()
    with pytest.raises(ConfigError, match="must bring its tokenizer"):
        load_checkpoint(tmp_path)


def test_internvl_takes_the_image_start_and_end_tokens_its_tokenizer_names_and_refuses_a_tokenizer_without(tmp_path):
    """InternVL's config has no start/end ids: the processor reads tokenizer.start_image_token/end_image_token
    (<img>, </img> in the published tokenizers), and so does the prompt here."""
    tokenizer = byte_level_tokenizer(SPECIALS + ["<im_s>", "<im_e>"], start_image_token="<im_s>", end_image_token="<im_e>")
    with_own_tokenizer(tmp_path / "named", "tiny-internvl", tokenizer=tokenizer)
    model = load_checkpoint(tmp_path / "named")
    ids = encode_frame(synthetic_frame(model.spec, 0), model).input_ids[0].tolist()
    n = model.family.image_tokens_per_camera(model.spec)
    start, end, image = tokenizer.convert_tokens_to_ids(["<im_s>", "<im_e>", "<IMG_CONTEXT>"])
    assert ids[:n + 2] == [start] + [image] * n + [end]
    assert tokenizer.convert_tokens_to_ids("<img>") not in ids
    # split vs HF's forward: same kernels, same inputs, one thread (test_partition.py, EXACT)
    assert verify_partitions(model, frames=1)["max_abs_diff"] == 0.0

    without = byte_level_tokenizer([t for t in SPECIALS if t not in ("<img>", "</img>")])
    with_own_tokenizer(tmp_path / "bare", "tiny-internvl", tokenizer=without)
    with pytest.raises(ConfigError, match="tokenizer has no '<img>' token"):
        load_checkpoint(tmp_path / "bare")
