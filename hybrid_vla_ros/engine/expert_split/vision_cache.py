"""Each image encoded once (issue 53): the vision tower's output for one image (its merged tokens and its DeepStack
rows) depends on that image alone, so a window of cameras x 4 frames needs the tower only for the images no earlier
window had (4 of the releases' 16, 6 of Alpamayo 2 Super's 24); the rest are kept from the windows before.

Keys are the caller's (the prefix node's: camera and stamp of each image, engine/expert_serve/frame_inputs.py), one
per image in the prompt's order; a prompt without keys is encoded whole, as the reference does. The images of a
window not kept are encoded together in one call, in prompt order. Kept: the images of the last `windows` prompts'
(2 by default: the window being prefilled and the one before it, whose frame may still be open and prefill its
route-free prompt with 1.5's guidance); each image's rows stay on the prefix's device (Alpamayo 1.5 at its pixel
budget: 16 images x up to 192 tokens x 4096 x (1 + 3 DeepStack) in bf16, ~100 MB a window).

Exact where the tower's kernels give an image the same rows alone as in a batch (checked at every cut on the CPU by
`hybrid-vla verify` and test/test_vision_cache.py; on a GPU by the device script)."""

from __future__ import annotations

from collections import OrderedDict

import torch

from ...errors import ConfigError, expect


class VisionCache:
    def __init__(self, windows: int = 2):
        expect(isinstance(windows, int) and windows >= 1, ConfigError,
               f"vision cache windows={windows!r}: expected >= 1 (the windows whose images stay encoded)")
        self.windows = windows
        self.kept: OrderedDict = OrderedDict()   # key -> (rows (n, H), DeepStack rows (k, n, H))
        self.encoded = self.reused = 0           # images of the last prompt: run through the tower / kept
        self.encoded_total = self.prompts = 0

    def encode(self, model, prompt) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """model: the Qwen3-VL model (vlm.model); prompt: with image_keys -> the image features (N, H) in prompt
        order and one (N, H) DeepStack addition per layer, as get_image_features' concatenated outputs."""
        keys = list(prompt.image_keys)
        grid = prompt.image_grid_thw
        expect(len(keys) == grid.shape[0], ConfigError,
               f"{len(keys)} image keys for {grid.shape[0]} images: one key per image is needed")
        missing = list(dict.fromkeys(k for k in keys if k not in self.kept))
        if missing:
            self._encode(model, prompt, keys, missing)
        for key in keys:
            self.kept.move_to_end(key)
        self.encoded, self.reused = len(missing), len(set(keys)) - len(missing)
        self.encoded_total += len(missing)
        self.prompts += 1
        self._trim(len(set(keys)))
        rows = [self.kept[k] for k in keys]
        features = torch.cat([r for r, _ in rows])                                          # (N, H)
        layers = rows[0][1].shape[0]
        return features, [torch.cat([d[i] for _, d in rows]) for i in range(layers)]        # k x (N, H)

    def _encode(self, model, prompt, keys: list, missing: list) -> None:
        """The images of `missing` (first occurrence of each) through the tower in one call."""
        patches = (prompt.image_grid_thw.prod(-1)).tolist()                                 # rows per image
        starts = [sum(patches[:i]) for i in range(len(patches))]
        first = {key: keys.index(key) for key in missing}
        index = [first[k] for k in missing]
        pixels = torch.cat([prompt.pixel_values[starts[i]:starts[i] + patches[i]] for i in index])
        out = model.get_image_features(pixels, prompt.image_grid_thw[index], return_dict=True)
        for j, key in enumerate(missing):
            stack = torch.stack([layer[j] for layer in out.deepstack_features]) if out.deepstack_features \
                else out.pooler_output[j].new_zeros((0,) + tuple(out.pooler_output[j].shape))
            self.kept[key] = (out.pooler_output[j], stack)                                  # (n, H), (k, n, H)

    def _trim(self, window_images: int) -> None:
        while len(self.kept) > self.windows * window_images:
            self.kept.popitem(last=False)

    def clear(self) -> None:
        self.kept.clear()
