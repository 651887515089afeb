"""OneVL as its authors save it (xiaomi-research/onevl @f4e6f05): the tiny release in test/data/onevl_tiny
(scripts/make_tiny_onevl.py: transformers' Qwen3VLForConditionalGeneration, the class their inference loads, with
their `_latent_cot_*` training modules in the same files, trained here to write one plan) is read as released, its
text answer decoded across the cut exactly at every p, read strictly into waypoints, and served by the graph in
separate processes. The answer reader is checked on its own against the authors' NAVSIM format."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from hybrid_vla_ros.engine.actionflow.packing import ActionFlow
from hybrid_vla_ros.engine.actionflow.reference import sequential_results
from hybrid_vla_ros.engine.actionflow.verify import verify_token_partitions
from hybrid_vla_ros.errors import ConfigError, InputError
from hybrid_vla_ros.model.inputs import encode_frame, synthetic_frame
from hybrid_vla_ros.model.load import load_vla
from hybrid_vla_ros.model.plugins import onevl
from hybrid_vla_ros.model.tokenize.text_waypoints import format_poses, parse_poses, trajectory_points

TINY = Path(__file__).parent / "data" / "onevl_tiny"
PLAN = np.array([[3.0 * (i + 1), 0.04 * (i + 1) ** 2, 0.0] for i in range(8)])   # what the tiny release was taught
END = ("<|im_end|>",)


@pytest.fixture(scope="module")
def model():
    return load_vla(checkpoint=str(TINY))


def test_the_answer_reader_takes_the_authors_navsim_format_and_nothing_else():
    body = format_poses(PLAN)                                 # "[3.00, 0.04, 0.00], [6.00, ...], ..."
    # their prompt ends with `<answer>[`: the generated text starts inside the first pose
    for text in ("[" + body[1:] + "</answer><|im_end|>", "[[" + body[1:] + "]</answer>", body + " </answer>\n"):
        np.testing.assert_allclose(parse_poses(text, 8, 3, END), PLAN)
    bad = {"[" + body[1:]: "does not end with </answer>",                        # cut off by the token budget
           body.rsplit(", [", 1)[0] + "</answer>": "has 7 poses",
           body.replace("[3.00, 0.04, 0.00]", "[3.00, 0.04]") + "</answer>": "expected 3 numbers",
           body.replace("3.00", "NaN", 1) + "</answer>": "not finite",
           body.replace("3.00", "1e9", 1) + "</answer>": "not finite or beyond",
           body + "</answer> and then some": "does not end with",
           body.replace("], [", "] [", 1) + "</answer>": "not a list of poses",
           body.replace("3.00", "true", 1) + "</answer>": "expected 3 numbers",
           body.replace("[3.00, 0.04, 0.00]", "[3.00, 0.04, 7.00]") + "</answer>": "beyond one turn"}
    for text, why in bad.items():
        with pytest.raises(InputError, match=why):
            parse_poses(text, 8, 3, END)


def test_poses_become_a_trajectory_with_speed_and_time():
    points = trajectory_points(PLAN, 0.5)
    assert points.shape == (8, 5)
    np.testing.assert_allclose(points[:, 4], 0.5 * np.arange(1, 9))
    np.testing.assert_allclose(points[0, 3], np.hypot(3.0, 0.04) / 0.5)
    np.testing.assert_allclose(trajectory_points(PLAN[:, :2], 0.5)[0, 2], np.arctan2(0.04, 3.0))


def test_the_release_is_read_as_saved_and_its_training_modules_are_left_unread(model):
    files = model.checkpoint_files
    assert onevl.is_release(TINY) and model.kind == "tokens" and model.spec.action_head == "text"
    assert "lm_head.weight" not in files.weight_map                         # tied, as Qwen3-VL-4B's
    assert files.head_keys == {"action_head.weight": onevl.EMBED_KEY}
    assert not any(k.startswith(onevl.LATENT_PREFIX) for k in files.read_keys)
    assert onevl.unserved_modules(files.weight_map) == ["aux_decoder", "float_head", "latent_proj",
                                                        "visual_latent_proj"]
    torch.testing.assert_close(model.action_head.weight, model.decoder.embed_tokens.weight, rtol=0, atol=0)


def test_the_prompt_is_the_chat_template_then_the_latent_block(model):
    tokenizer = model.prompt.tokenizer
    ids = model.prompt.ids(1, model.image_tokens)
    text = tokenizer.decode(ids)
    assert text.startswith("<|im_start|>user\n<|vision_start|><|image_pad|>")
    assert text.endswith(onevl.INSTRUCTION + "<|im_end|>\n<|im_start|>assistant\n<|start-latent-vis|>"
                         "<|latent-vis|><|latent-vis|><|latent-vis|><|latent-vis|><|end-latent-vis|><|start-latent|>"
                         "<|latent|><|latent|><|end-latent|><answer>[")
    assert ids.count(model.prompt.image_token_id) == model.image_tokens == model.sequence_length - len(
        tokenizer.encode(text.replace("<|image_pad|>", ""), add_special_tokens=False))
    assert model.prompt.stop_ids == tuple(sorted(tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_end|>"])))


def test_the_authors_generate_writes_the_same_tokens_as_the_package(model):
    """Their inference: Qwen3VLForConditionalGeneration.from_pretrained(...).generate(do_sample=False) on the
    prompt and pixels; the package's sequential decode and its packed decode cut at every p give those tokens."""
    from transformers import Qwen3VLForConditionalGeneration
    theirs = Qwen3VLForConditionalGeneration.from_pretrained(str(TINY)).eval()
    frames = [synthetic_frame(model.spec, seq, seed=9) for seq in range(2)]
    ours = {r.seq: r for r in sequential_results(model, frames)}
    for frame in frames:
        encoded = encode_frame(frame, model)
        out = theirs.generate(input_ids=encoded.input_ids, attention_mask=torch.ones_like(encoded.input_ids),
                              mm_token_type_ids=encoded.mm_token_type_ids, **encoded.pixels, do_sample=False,
                              max_new_tokens=model.spec.answer_tokens)   # stops where its generation_config says
        generated = out[0, encoded.input_ids.shape[1]:].tolist()
        assert generated == ours[frame.seq].tokens
        np.testing.assert_allclose(ours[frame.seq].trajectory.points[:, :2], PLAN[:, :2], atol=0.006)
    for p in range(model.num_blocks + 1):
        packed = {r.seq: r for r in ActionFlow(model, 2, partition=p).run(frames)}
        assert all(packed[s].tokens == ours[s].tokens for s in ours), p


def test_verify_prints_zero_at_every_cut(model):
    result = verify_token_partitions(model, frames=2)
    assert [r["partition"] for r in result["results"]] == list(range(model.num_blocks + 1))
    assert result["max_abs_diff"] == 0.0 and result["answer"] == "text"


def test_an_answer_that_is_no_plan_gives_its_tokens_and_the_reason_not_a_trajectory(model):
    from hybrid_vla_ros.engine.decode.decoder import TokenDecoder
    from hybrid_vla_ros.engine.decode.policy import DecodePolicy
    short = TokenDecoder(model, DecodePolicy(max_tokens=20))    # cut off long before </answer>
    frame = synthetic_frame(model.spec, 0, seed=9)
    result = sequential_results(model, [frame], DecodePolicy(max_tokens=20))[0]
    assert result.trajectory is None and len(result.tokens) == 20 and result.ended == "max_tokens"
    assert result.reason == "answer_unreadable" and "does not end with </answer>" in result.error
    assert short.max_tokens == 20


def test_serving_fields_default_to_navsim_but_the_instruction_and_a_deployment_file_is_checked(tmp_path):
    release = tmp_path / "release"
    shutil.copytree(TINY, release)
    (release / onevl.SERVING_FILE).unlink()
    with pytest.raises(ConfigError, match="must state at least the prompt's 'instruction'"):
        load_vla(checkpoint=str(release), shapes_only=True)
    (release / onevl.SERVING_FILE).write_text(json.dumps({"instruction": "Drive."}))
    spec = load_vla(checkpoint=str(release), shapes_only=True).spec
    assert (spec.num_cameras, spec.image_height, spec.image_width, spec.num_waypoints, spec.waypoint_dt_s,
            spec.answer_tokens) == (1, 1088, 1920, 8, 0.5, 256)
    for bad, why in (({"cameras": 2}, "unknown fields"), ({"image_height": "64"}, "expected a int"),
                     ({"answer_values": 4}, "answer_values=4"), ({}, "'instruction' must be"),
                     ({"text_latents": -1}, "text_latents=-1"), ({"answer_prefix": "<x>"}, "without '<' or '>'")):
        (release / onevl.SERVING_FILE).write_text(json.dumps({"instruction": "Drive.", **bad} if bad else bad))
        with pytest.raises(ConfigError, match=why):
            load_vla(checkpoint=str(release), shapes_only=True)


@pytest.mark.slow
def test_the_graph_serves_the_release_in_processes_with_the_sequential_plan(model, domain, tmp_path):
    """The prefix and suffix nodes as separate processes, the release's directory as model.checkpoint: every frame's
    plan, read from the text the suffix decoded, equals the unsplit sequential decode's."""
    from ros_harness import TINY_OVERRIDES
    from hybrid_vla_ros.ros.demo import drive_graph, write_sample_drive
    from hybrid_vla_ros.ros.launch_support.bringup import graph_params, write_combined_config
    dataclass_replace = __import__("dataclasses").replace
    release = {"model.preset": "", "model.checkpoint": str(TINY)}
    overrides = {k: {**v, **release, **({} if k == "hybrid_vla_scheduler" else {"pack": 2, "pack_groups": 2})}
                 for k, v in TINY_OVERRIDES.items()}
    topics = ["/test/front/image"]
    overrides["hybrid_vla_prefix"].update(image_transport="raw", camera_topics=topics, token_timeout_s=20.0)
    bag = write_sample_drive(tmp_path / "drive", model.spec, topics, frames=4, compressed=False)
    params = graph_params(overrides=overrides)
    config = write_combined_config(params, tmp_path / "graph.yaml")
    summary, trajectories = drive_graph(bag, params, processes=True, config=str(config), settle_s=60)
    assert summary["trajectories"] == 4 and summary["transports"] == ["packed"], summary
    frames = [dataclass_replace(synthetic_frame(model.spec, seq, seed=7), ego=None) for seq in range(4)]
    want = [r.trajectory.points for r in sequential_results(model, frames)]   # the bag's stamps are its own
    assert len(trajectories) == len(want)
    for stamp, points in zip(sorted(trajectories), want):
        np.testing.assert_allclose(np.asarray(trajectories[stamp])[:, :2], points[:, :2], atol=1e-4)
