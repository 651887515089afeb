"""Each image encoded once (issue 53): the vision tower's output for one image (its merged tokens and its DeepStack
rows) depends on that image alone, so a window of cameras x 4 frames needs the tower only for the images no earlier
window had (4 of the releases' 16, 6 of Alpamayo 2 Super's 24); the rest are kept from the windows before.

Keys are the caller's, one per image in the prompt's order, each (camera, stamp) (the prefix node's,
engine/expert_serve/frame_inputs.py); a prompt without keys is encoded whole, as the reference does.

Exact only where the tower's kernels give an image the same rows in a call of the new images as in a call of the
whole window, which depends on the kernels and the shapes (seen here: equal for Alpamayo 1 / 1.5's tiny towers,
up to 2e-6 apart for Alpamayo 2 Super's, enough for its random tiny flow to move the plan 0.2 m). So the first
window is encoded whole, as the reference does, and its newest images once more in a call of their own: the rows
equal to the bit, reuse is on for windows of that shape (images, their grids, that many new); otherwise it stays
off and `why` says by how much they differ. A window with another count of new images, or another shape (which
re-probes), is encoded whole. Kept: the images of the last `windows` prompts (2 by default: the window being
prefilled and the one before it, whose frame may still be open and prefill its route-free prompt with 1.5's
guidance); rows stay on the prefix's device (Alpamayo 1.5 at its pixel budget: 16 images x up to 192 tokens x 4096
x (1 + 3 DeepStack) in bf16, ~100 MB a window)."""

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
        self.exact: bool | None = None           # None: not probed yet for `shape`
        self.why, self.shape, self.new_per_window = "not probed yet", None, 0
        self.encoded = self.reused = 0           # images of the last prompt: run through the tower / kept
        self.encoded_total = self.prompts = 0

    def encode(self, model, prompt) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """model: the Qwen3-VL model (vlm.model); prompt: with image_keys -> the image features (N, H) in prompt
        order and one (N, H) DeepStack addition per layer, as get_image_features' concatenated outputs."""
        keys = list(prompt.image_keys)
        expect(len(keys) == prompt.image_grid_thw.shape[0], ConfigError,
               f"{len(keys)} image keys for {prompt.image_grid_thw.shape[0]} images: one key per image is needed")
        shape = (len(keys), tuple(map(tuple, prompt.image_grid_thw.tolist())))
        missing = list(dict.fromkeys(k for k in keys if k not in self.kept))
        if shape != self.shape or (missing and not (self.exact and len(missing) == self.new_per_window)):
            rows = self._call(model, prompt, range(len(keys)))                              # as the reference
            self._keep(keys, rows)
            if shape != self.shape:
                self._probe(model, prompt, keys, rows)
                self.shape = shape
            return self._assemble(keys, rows, len(set(keys)))
        if missing:
            self._keep(missing, self._call(model, prompt, [keys.index(k) for k in missing]))
        return self._assemble(keys, [self.kept[k] for k in keys], len(missing))

    def _probe(self, model, prompt, keys: list, rows: list) -> None:
        """The window's newest images alone against their rows in the whole window's call: reuse is on when they
        agree to the bit."""
        newest = max(k[1] for k in keys)
        fresh = list(dict.fromkeys(k for k in keys if k[1] == newest))
        alone = self._call(model, prompt, [keys.index(k) for k in fresh])
        gap = max(max(float((a - b).abs().max()) for a, b in zip(mine, rows[keys.index(k)]))
                  for k, mine in zip(fresh, alone))
        self.exact, self.new_per_window = gap == 0.0 and len(fresh) < len(set(keys)), len(fresh)
        self.why = "" if self.exact else (
            f"the newest {len(fresh)} images encoded alone differ from their rows in the whole window's call by "
            f"{gap:.1e} (the tower's kernels): every window encoded whole" if gap else
            "every image of the window is new: nothing to reuse")

    def _call(self, model, prompt, index) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The images at `index` (prompt order) through the tower in one call -> per image (rows, DeepStack rows)."""
        index = list(index)
        patches = prompt.image_grid_thw.prod(-1).tolist()                                  # rows per image
        starts = [sum(patches[:i]) for i in range(len(patches))]
        pixels = torch.cat([prompt.pixel_values[starts[i]:starts[i] + patches[i]] for i in index])
        out = model.get_image_features(pixels, prompt.image_grid_thw[index], return_dict=True)
        rows = []
        for j in range(len(index)):
            main = out.pooler_output[j]                                                     # (n, H)
            stack = torch.stack([layer[j] for layer in out.deepstack_features]) if out.deepstack_features \
                else main.new_zeros((0,) + tuple(main.shape))                               # (k, n, H)
            rows.append((main, stack))
        return rows

    def _keep(self, keys: list, rows: list) -> None:
        """Each key's rows (a key listed twice, a repeated oldest frame: its first)."""
        seen = set()
        for key, row in zip(keys, rows):
            if key not in seen:
                self.kept[key] = row
                seen.add(key)

    def _assemble(self, keys: list, rows: list, encoded: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
        for key in keys:
            self.kept.move_to_end(key)
        unique = len(set(keys))
        self.encoded, self.reused = encoded, unique - encoded
        self.encoded_total += encoded
        self.prompts += 1
        while len(self.kept) > self.windows * unique:
            self.kept.popitem(last=False)
        features = torch.cat([r for r, _ in rows])                                          # (N, H)
        return features, [torch.cat([d[i] for _, d in rows]) for i in range(rows[0][1].shape[0])]  # k x (N, H)

    def clear(self) -> None:
        self.kept.clear()
        self.shape, self.exact, self.why = None, None, "not probed yet"
