"""Each image encoded once (issue 53, engine/expert_split/vision_cache.py): a window of cameras x 4 frames runs the
vision tower only on the images no earlier window had, and every frame stays exactly run_reference's (which encodes
every window whole), through the byte servers the prefix and suffix nodes run."""

import numpy as np
import pytest
import torch

from test_alpamayo_graph import SAMPLING, SEED, camera_sets, releases  # noqa: F401 (releases: the fixture)
from test_alpamayo_servers import serve
from hybrid_vla_ros.engine.expert_serve.frame_inputs import PromptText, frame_inputs, still_history
from hybrid_vla_ros.engine.expert_serve.prefix_server import AlpamayoPrefixServer, PrefixJob
from hybrid_vla_ros.engine.expert_serve.suffix_server import AlpamayoSuffixServer
from hybrid_vla_ros.engine.expert_split.vision_cache import VisionCache
from hybrid_vla_ros.errors import ConfigError
from hybrid_vla_ros.model.plugins import alpamayo
from hybrid_vla_ros.model.plugins.alpamayo.reference import fused_prompt

CAMERAS, FRAMES = 4, 4


def window(model, sets, last: int, text, keyed=True):
    """The window ending at camera set `last`, as the prefix node builds it: camera-major, oldest first, the oldest
    set repeated until 4 came; keyed by camera and a stamp of each camera's own (cameras are not stamped alike)."""
    indices = [max(0, k) for k in range(last - FRAMES + 1, last + 1)]
    keys = tuple((c, 100 * k + c) for c in range(CAMERAS) for k in indices)
    inputs = frame_inputs(model, [sets[k // 100][c] for c, k in keys], still_history(), text, route=True)
    inputs.image_keys = keys if keyed else None
    return inputs


ENCODED = {0: (16, 0), 1: (20, 0)}   # window 0: whole (4 distinct images padded to 16); 1: whole + its 4 new alone


def test_a_window_encodes_only_its_new_images_and_every_frame_equals_the_reference(releases):
    """1.5 with guidance, from the drive's first frame (padded): the first two windows are encoded whole (the second
    with its 4 new images once more: the check), each later one its newest 4 (the route-free prompt of the same
    frame none); tokens and trajectory equal run_reference's at each cut."""
    model = alpamayo.load_release(releases["1.5"])
    text, flow = PromptText.from_release(releases["1.5"]), alpamayo.FlowSettings(3, 2.5)
    sets = camera_sets(6)
    suffix = AlpamayoSuffixServer(model)
    for p in (0, 2, 4):
        prefix = AlpamayoPrefixServer(model, p, SAMPLING, flow, guidance=True, seed=SEED)
        for last in range(4):
            inputs = window(model, sets, last, text)
            outcome, replies = serve(prefix, suffix, PrefixJob(inputs, last, 1000 * p + last))
            assert outcome.sent, outcome
            encoded, reused = ENCODED.get(last, (4, 12))
            assert outcome.images == {"encoded": encoded, "reused": reused}, (p, last)
            ref = alpamayo.run_reference(model, window(model, sets, last, text, keyed=False),
                                         outcome.settings.seed, SAMPLING, flow, True)
            finished = next(r.finished for r in replies if r.finished).result
            assert finished.tokens == ref.tokens and torch.equal(finished.xyz, ref.xyz), (p, last)
        assert len(prefix.vision.kept) <= 2 * CAMERAS * FRAMES


def test_the_cache_rows_equal_the_whole_window_encoding(releases):
    model = alpamayo.load_release(releases["r1"])
    text = PromptText.from_release(releases["r1"])
    sets = camera_sets(5)
    vision, visual = VisionCache(), model.vlm.model
    for last in range(5):
        prompt = fused_prompt(model, window(model, sets, last, text))
        with torch.inference_mode():
            got, got_deepstack = vision.encode(visual, prompt)
            whole = visual.get_image_features(prompt.pixel_values, prompt.image_grid_thw, return_dict=True)
        torch.testing.assert_close(got, torch.cat(whole.pooler_output), rtol=0, atol=0)
        for mine, theirs in zip(got_deepstack, whole.deepstack_features):
            torch.testing.assert_close(mine, torch.cat(theirs), rtol=0, atol=0)
        assert (vision.encoded, vision.reused) == ENCODED.get(last, (4, 12)), last
    assert vision.exact and vision.new_per_window == CAMERAS
    # each kept row owns its memory (a view would keep its whole call's output alive)
    assert all(row.untyped_storage().nbytes() == row.numel() * row.element_size() for row, _ in vision.kept.values())


def test_keys_must_name_each_image_and_the_kept_windows_are_bounded(releases):
    model = alpamayo.load_release(releases["r1"])
    text = PromptText.from_release(releases["r1"])
    sets = camera_sets(12)
    prompt = fused_prompt(model, window(model, sets, 3, text))
    vision = VisionCache(windows=1)
    with pytest.raises(ConfigError, match="one key per image"):
        vision.encode(model.vlm.model, type(prompt)(prompt.input_ids, prompt.pixel_values, prompt.image_grid_thw,
                                                    prompt.image_keys[:-1]))
    with pytest.raises(ConfigError, match="windows=0"):
        VisionCache(windows=0)
    with torch.inference_mode():
        for last in range(3, 12):
            vision.encode(model.vlm.model, fused_prompt(model, window(model, sets, last, text)))
            assert len(vision.kept) <= CAMERAS * FRAMES
    assert vision.encoded_total == 16 + 20 + 7 * 4 and vision.prompts == 9
    np.testing.assert_array_equal(sorted(k // 100 for _, k in vision.kept), sorted(list(range(8, 12)) * CAMERAS))


class CallDependentTower:
    """The real tower, its rows moved by 1e-6 x the images in the call: what kernels that sum in another order for
    another batch do (a test double for such kernels; seen here on Alpamayo 2 Super's tiny tower, 2e-6)."""

    def __init__(self, model):
        self.model = model

    def get_image_features(self, pixels, grid, return_dict=True):
        out = self.model.get_image_features(pixels, grid, return_dict=True)
        shift = 1e-6 * grid.shape[0]
        out.pooler_output = tuple(rows + shift for rows in out.pooler_output)
        return out


def test_a_tower_whose_rows_depend_on_the_call_keeps_reuse_off_and_stays_exact(releases):
    model = alpamayo.load_release(releases["r1"])
    text = PromptText.from_release(releases["r1"])
    sets, tower, vision = camera_sets(6), CallDependentTower(model.vlm.model), VisionCache()
    encoded = []
    with torch.inference_mode():
        for last in (3, 4, 5, 5):
            prompt = fused_prompt(model, window(model, sets, last, text))
            got, _ = vision.encode(tower, prompt)
            whole = tower.get_image_features(prompt.pixel_values, prompt.image_grid_thw)
            torch.testing.assert_close(got, torch.cat(whole.pooler_output), rtol=0, atol=0)
            encoded.append(vision.encoded)
    assert encoded == [16, 20, 16, 0] and not vision.kept   # the same window again: its own call's rows
    assert vision.exact is False and "differ from their rows in the whole window's call by 1.2e-05" in vision.why


def test_verify_turns_reuse_on_for_the_tiny_1_5_and_reports_the_images_each_run_encoded():
    from hybrid_vla_ros.engine.expert_split.verify import verify_split
    from hybrid_vla_ros.model.load import load_vla
    report = verify_split(load_vla(preset="tiny-alpamayo-1.5"), frames=3, reasoning_tokens=2)
    assert report["max_abs_diff"] == 0.0 and report["encode_once"] == {"on": True, "decided": True, "why": ""}
    # runs: (frame, guidance) for frames 0, 1, 2; the route-free prompt of a frame reads its window's rows again
    assert all(r["images_encoded"] == [16, 0, 20, 0, 4, 0] for r in report["results"])
