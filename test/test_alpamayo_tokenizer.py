"""Issue 51: the special-token ids the package computes for an Alpamayo release (model/plugins/alpamayo/config.py)
are the ones a real transformers tokenizer gives when it is built the way the authors' code builds it
(NVlabs/alpamayo and alpamayo1.5 base_model.py `_build_tokenizer`: the backbone's tokenizer, whose base vocabulary
already holds <|image_pad|>, then `add_tokens` of <i0> .. <iN-1>, then of the special tokens with
special_tokens=True); the route span of a prompt carries the tokenizer's ids; a tokenizer beside a release that
disagrees with its config.json is refused at load, naming the token. Offline: a byte-level tokenizer with Qwen3's
added tokens stands in for Qwen3-VL's (same layout of the added tokens, 256 byte tokens instead of 151643 BPE)."""

import itertools
import json
import re

import pytest
import torch
from safetensors.torch import save_file

from hybrid_vla_ros.engine.expert_serve.frame_inputs import PromptText, prompt_ids
from hybrid_vla_ros.errors import ConfigError
from hybrid_vla_ros.model.plugins.alpamayo import load_release, parse
from hybrid_vla_ros.model.plugins.alpamayo import tiny
from published_alpamayo import SPECIAL_KEYS     # the authors' SPECIAL_TOKENS_KEYS (Alpamayo 1), written there

# Alpamayo 1.5 renames nine of them <|_padding_0|> .. <|_padding_8|> (alpamayo1_5 base_model.py): index -> i
PADDING_1_5 = {3: 0, 6: 1, 10: 2, 11: 3, 13: 4, 18: 5, 19: 6, 20: 7, 21: 8}
TRAJ = ("history", "future", "history_start", "future_start", "history_end", "future_end")
RELEASES = ("alpamayo_r1", "alpamayo1_5")


def authors_specials(model_type: str) -> list[str]:
    return [f"<|_padding_{PADDING_1_5[i]}|>" if model_type == "alpamayo1_5" and i in PADDING_1_5 else f"<|{k}|>"
            for i, k in enumerate(SPECIAL_KEYS)]


def qwen_style_tokenizer(added=tiny.QWEN_ADDED):
    """Byte-level BPE, no merges, then Qwen3's added tokens in their order (special, as Qwen's are)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.add_tokens(list(added), special_tokens=True)
    return tokenizer


def as_the_authors_build_it(model_type: str, traj_vocab: int = tiny.TRAJ_VOCAB):
    """The backbone's tokenizer with the release's tokens added, in their code's order."""
    tokenizer = qwen_style_tokenizer()
    assert tokenizer.add_tokens([f"<i{v}>" for v in range(traj_vocab)]) == traj_vocab
    tokenizer.add_tokens(authors_specials(model_type), special_tokens=True)
    return tokenizer


def authors_config(tokenizer, model_type: str) -> dict:
    """The fields their config takes from the tokenizer (base_model.py _initialize_vlm_config)."""
    return {"model_type": model_type, "add_special_tokens": True, "traj_vocab_size": tiny.TRAJ_VOCAB,
            "vocab_size": len(tokenizer), "traj_token_start_idx": tokenizer.convert_tokens_to_ids("<i0>"),
            "traj_token_ids": {k: tokenizer.convert_tokens_to_ids(f"<|traj_{k}|>") for k in TRAJ}}


@pytest.mark.parametrize("model_type", RELEASES)
def test_the_package_computes_the_ids_a_real_tokenizer_gives_built_the_authors_way(model_type):
    tokenizer = as_the_authors_build_it(model_type)
    image_pad = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert image_pad == tiny.base_id("<|image_pad|>") < tiny.BASE_VOCAB                 # kept its base id
    assert len(tokenizer) == tiny.BASE_VOCAB + tiny.TRAJ_VOCAB + len(SPECIAL_KEYS) - 1   # 28 added, not 29
    config = parse(authors_config(tokenizer, model_type), None, vlm=tiny.backbone_config())
    theirs = dict(zip(SPECIAL_KEYS, tokenizer.convert_tokens_to_ids(authors_specials(model_type))))
    assert config.special_ids == theirs
    assert config.special_ids["image_pad"] == config.vlm.image_token_id == image_pad


@pytest.mark.parametrize("model_type", RELEASES)
def test_the_route_span_carries_the_tokenizers_ids(model_type):
    tokenizer = as_the_authors_build_it(model_type)
    config = parse(authors_config(tokenizer, model_type), None, vlm=tiny.backbone_config())
    route = tuple(tokenizer("turn left at the lights", add_special_tokens=False).input_ids)
    ids = prompt_ids(config, [1] * 16, PromptText(route=route), route=True)[0].tolist()
    start = ids.index(config.special_ids["route_start"])
    span = ids[start:start + len(route) + 2]
    assert span == tokenizer("<|route_start|>turn left at the lights<|route_end|>", add_special_tokens=False).input_ids


@pytest.mark.parametrize("name", sorted(tiny.PRESETS))
def test_the_tiny_presets_are_laid_out_as_the_authors_tokenizer_lays_a_release_out(name):
    model_type = tiny.PRESETS[name]
    raw = tiny.raw_config(name)
    assert {k: raw[k] for k in ("vocab_size", "traj_token_start_idx", "traj_token_ids")} == \
        {k: v for k, v in authors_config(as_the_authors_build_it(model_type), model_type).items()
         if k in ("vocab_size", "traj_token_start_idx", "traj_token_ids")}


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """tiny-alpamayo-1.5 written as a release directory: config.json, model.safetensors, vlm/config.json."""
    folder = tmp_path_factory.mktemp("release")
    model = tiny.build_preset("tiny-alpamayo-1.5")
    save_file({k: v.detach().clone().contiguous() for k, v in model.state_dict().items()},
              str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(tiny.raw_config("tiny-alpamayo-1.5")))
    tiny.backbone_config().save_pretrained(folder / "vlm")
    return folder


def preset_release_with_tokenizer(folder, preset: str, model_type: str):
    """A tiny preset saved as its release is laid out (weights, config.json, vlm/), with the tokenizer the authors'
    code builds for `model_type` -> (folder, tokenizer)."""
    model = tiny.build_preset(preset)
    folder.mkdir()
    save_file({k: v.detach().clone().contiguous() for k, v in model.state_dict().items()},
              str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(tiny.raw_config(preset)))
    tiny.backbone_config().save_pretrained(folder / "vlm")
    tokenizer = as_the_authors_build_it(model_type)
    with_tokenizer(folder, tokenizer, "")
    return folder, tokenizer


def with_tokenizer(folder, tokenizer, where: str):
    for stale in ("", "vlm"):
        for name in ("tokenizer.json", "tokenizer_config.json"):
            (folder / stale / name).unlink(missing_ok=True)
    tokenizer.save_pretrained(folder / where)
    return folder


def test_a_release_loads_with_the_backbones_tokenizer_or_its_own_extended_one(release):
    with_tokenizer(release, qwen_style_tokenizer(), "vlm")             # what the authors' code starts from
    model = load_release(release)
    assert torch.equal(model.action_out_proj.weight, tiny.build_preset("tiny-alpamayo-1.5").action_out_proj.weight)
    with_tokenizer(release, as_the_authors_build_it("alpamayo1_5"), "")   # saved with the release's tokens
    load_release(release)


@pytest.mark.parametrize("tokenizer, where, token", [
    (lambda: qwen_style_tokenizer([t for t in tiny.QWEN_ADDED if t != "<|image_pad|>"]), "vlm", "<|image_pad|>"),
    (lambda: qwen_style_tokenizer(tiny.QWEN_ADDED + ("<extra>",)), "vlm", "<i0>"),
    (lambda: as_the_authors_build_it("alpamayo_r1"), "", "<|_padding_0|>"),
    (lambda: as_the_authors_build_it("alpamayo1_5", tiny.TRAJ_VOCAB + 1), "", "<|traj_history|>"),
], ids=["base-without-image-pad", "one-more-base-token", "r1-names-for-1.5", "one-more-traj-token"])
def test_a_tokenizer_that_disagrees_with_the_config_is_refused_at_load_naming_the_token(release, tokenizer, where,
                                                                                      token):
    with_tokenizer(release, tokenizer(), where)
    with pytest.raises(ConfigError, match=f"gives {re.escape(token)} the id"):
        load_release(release)


def test_the_real_size_preset_has_the_vocabulary_the_authors_code_computes():
    from hybrid_vla_ros.model.presets import get_preset
    from manifest_checkpoint import load_manifest
    released = load_manifest("alpamayo_r1_released")["config_json"]
    assert get_preset("alpamayo-r1-like").vocab_size == released["vocab_size"] == 151669 + 4000 + 28


@pytest.mark.slow
def test_a_release_with_a_tokenizer_is_served_with_its_authors_prompt_and_its_reasoning_as_text(tmp_path, domain):
    """Issue 51, item 3: the prefix builds the prompt from the release's tokenizer as the authors' code does (no
    prompt_ids.json; the trajectories equal run_reference on that prompt); ~/output/reasoning carries the decoded reasoning of each frame (the release's tokenizer,
    extended as the authors' code extends it; special tokens left out) with the frame's camera stamp, beside its
    trajectory_info's ids. A release without a tokenizer publishes none (the graph tests of test_alpamayo_graph)."""
    import rclpy
    StringStamped = pytest.importorskip(   # built by scripts/setup.sh beside ../shared (else the node's std_msgs
        "autoware_internal_debug_msgs.msg",  # fallback, which this test does not read)
        reason="the real Autoware messages (scripts/setup.sh builds them)").StringStamped
    from test_alpamayo_graph import BASE_NS, Driver, camera_sets, check, expected, graph_params
    from hybrid_vla_ros.ros.launch_support.bringup import InProcessGraph
    from hybrid_vla_ros.ros.messages import stamp_to_ns
    from ros_harness import wait_until
    folder, tokenizer = preset_release_with_tokenizer(tmp_path / "r1", "tiny-alpamayo-r1", "alpamayo_r1")
    context = rclpy.Context()
    rclpy.init(context=context)
    graph = InProcessGraph(graph_params(folder, False), context=context, nodes=("hybrid_vla_prefix", "hybrid_vla_suffix"))
    driver = Driver(context, graph.executor, graph.spin_once)
    said = []
    driver.node.create_subscription(StringStamped, "/hybrid_vla_suffix/output/reasoning", said.append, 10)
    try:
        assert not graph.failed, graph.failed
        sets = camera_sets(2)
        paths, infos = driver.drive(sets, timeout_s=60)
        check(paths, infos, expected(graph.nodes["hybrid_vla_suffix"].serving.model, sets, False))   # the prompt:
        assert wait_until(lambda: len(said) >= 2, driver.spin, 10)                   # the tokenizer's (release_prompt)
        for k, (msg, info) in enumerate(zip(said, infos)):
            ids = [int(t) for t in info["tokens"].split(",")]
            assert stamp_to_ns(msg.stamp) == int(info["stamp_ns"]) == BASE_NS + k * 100_000_000
            assert msg.data == tokenizer.decode(ids, skip_special_tokens=True) and msg.data.strip()
    finally:
        driver.close()
        graph.shutdown()
        rclpy.shutdown(context=context)


@pytest.mark.parametrize("model_type", RELEASES)
def test_the_prompt_is_the_authors_chat_tokenized_whole_with_each_image_pad_expanded(model_type):
    """engine/expert_serve/release_prompt.py against the authors' layout (NVlabs/alpamayo helper.py and
    alpamayo1.5's): the system and instruction text in the chat's role markers, 16 images camera-major (1.5:
    labelled "Front left camera: frame 0 " ...), the 48 history pads, the route span (1.5), <|cot_start|> last."""
    from hybrid_vla_ros.engine.expert_serve.release_prompt import INSTRUCTION, SYSTEM, ReleasePrompt, prompt_text
    tokenizer = as_the_authors_build_it(model_type)
    config = parse(authors_config(tokenizer, model_type), None, vlm=tiny.backbone_config())
    route = "Turn right in 30m" if model_type == "alpamayo1_5" else None
    counts = [3 + k % 2 for k in range(16)]
    ids = ReleasePrompt(tokenizer).ids(config, counts, route or False, 4)[0].tolist()
    text = tokenizer.decode(ids)
    pad = config.vlm.image_token_id
    assert text.startswith(f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n")
    assert text.endswith(f"{INSTRUCTION}<|im_end|>\n<|im_start|>assistant\n<|cot_start|>")
    assert ids.count(pad) == sum(counts) and ids[-1] == config.special_ids["cot_start"]
    assert ids.count(config.traj_token_ids["history"]) == 48
    runs = [len(list(run)) for token, run in itertools.groupby(ids) if token == pad]
    assert runs == counts                                            # each image's own count, camera-major
    labelled = "Front left camera: frame 0 <|vision_start|>" in text and "Front telephoto camera: frame 0 " in text
    assert labelled == (model_type == "alpamayo1_5") and ("frame 3 " in text) == labelled
    if route:
        assert "<|traj_history_end|><|route_start|>Turn right in 30m<|route_end|>output the" in text
    unexpanded = tokenizer(prompt_text(model_type, 4, route), add_special_tokens=False).input_ids
    assert [t for t in ids if t != pad] == [t for t in unexpanded if t != pad]   # tokenized whole, as theirs
