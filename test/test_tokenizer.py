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
from hybrid_vla_ros.model.prompt import TokenizerPrompt

SPECIALS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|plan|>", "<image>"]
TOKEN_KEYS = {"qwen2_vl": {"image_token_id": "<|image_pad|>", "vision_start_token_id": "<|vision_start|>",
                           "vision_end_token_id": "<|vision_end|>"},
              "llava": {"image_token_id": "<image>", "image_token_index": "<image>"}}


def byte_level_tokenizer():
    """A byte-level BPE tokenizer with no merges (every byte one token) and the specials, built offline."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=SPECIALS)


def set_head_metadata(directory, **changes):
    with safe_open(str(directory / HEAD_FILE), "pt") as handle:
        tensors, meta = {k: handle.get_tensor(k) for k in handle.keys()}, handle.metadata()
    vla = {k: v for k, v in {**json.loads(meta["hybrid_vla"]), **changes}.items() if v is not None}
    save_file(tensors, str(directory / HEAD_FILE), metadata={**meta, "hybrid_vla": json.dumps(vla)})


def with_own_tokenizer(directory, preset, plan_token="<|plan|>"):
    """A preset exported, then given a tokenizer whose special ids differ from the built-in layout's."""
    save_checkpoint(load_vla(preset=preset), directory)
    tokenizer = byte_level_tokenizer()
    tokenizer.save_pretrained(directory)
    config = json.loads((directory / "config.json").read_text())
    family = "llava" if config["model_type"] == "llava" else "qwen2_vl"
    for key, token in TOKEN_KEYS[family].items():
        if key in config or key == "image_token_id":
            config[key] = tokenizer.convert_tokens_to_ids(token)
    (directory / "config.json").write_text(json.dumps(config))
    set_head_metadata(directory, plan_token=plan_token)
    return tokenizer


@pytest.mark.parametrize("preset", ["tiny", "tiny-llava", "tiny-qwen3vl"])
def test_a_checkpoint_with_its_own_tokenizer_is_prompted_with_it_and_splits_exactly(tmp_path, preset):
    tokenizer = with_own_tokenizer(tmp_path, preset)
    model = load_checkpoint(tmp_path)
    assert isinstance(model.prompt, TokenizerPrompt)
    ids = encode_frame(synthetic_frame(model.spec, 0), model).input_ids[0].tolist()
    n = model.family.image_tokens_per_camera(model.spec)
    qwen = preset != "tiny-llava"
    image_id = tokenizer.convert_tokens_to_ids("<|image_pad|>" if qwen else "<image>")
    assert ids.count(image_id) == model.spec.num_cameras * n and image_id >= 256  # not the built-in id 2
    if qwen:
        start = tokenizer.convert_tokens_to_ids("<|vision_start|>")
        assert ids[:n + 2] == [start] + [image_id] * n + [tokenizer.convert_tokens_to_ids("<|vision_end|>")]
    assert ids[-1] == tokenizer.convert_tokens_to_ids("<|plan|>")
    assert len(ids) == model.prompt.sequence_length(model.spec.num_cameras, n, model.spec.text_tokens)
    text = tokenizer.decode(ids[-1 - 16 - model.spec.text_tokens:-1 - 16]).replace("<|endoftext|>", "")
    assert text == synthetic_frame(model.spec, 0).instruction[:model.spec.text_tokens]
    assert verify_partitions(model)["max_abs_diff"] <= 1e-6


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
