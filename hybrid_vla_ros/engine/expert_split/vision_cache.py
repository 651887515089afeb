"""Each image encoded once (issue 53): the vision tower's output for one image (its merged tokens and its DeepStack
rows) depends on that image alone, so a window of cameras x 4 frames needs the tower only for the images no earlier
window had (4 of the releases' 16, 6 of Alpamayo 2 Super's 24); the rest are kept from the windows before.

Keys are the caller's, one per image in the prompt's order, unique to an image (the prefix node's: camera, stamp and
message, ros/nodes/serving/alpamayo/prefix_stage.py); a prompt without keys is encoded whole, as the reference does.

Exact only where the tower's kernels give an image the same rows in a call of the new images as in a call of the
whole window, which depends on the kernels and the shapes (seen on a 2-core AMD EPYC with avx512_bf16: equal for Alpamayo 1 / 1.5's tiny towers,
up to 2e-6 apart for Alpamayo 2 Super's, enough for its random tiny flow to move the plan 0.2 m). So windows are
encoded whole, as the reference does, until a window comes whose images partly repeat the one before (the first
windows of a drive repeat their oldest frame until 4 came, and may share nothing): its new images are then encoded
once more in a call of their own, and reuse is on for windows of that shape (images, grids, that many new) when
their rows agree to the bit; otherwise it stays off (`why` says by how much they differ) and nothing is kept. A
window with another count of new images is encoded whole; another shape probes again. Kept while on: the images of
the last `windows` prompts (2 by default: the window being prefilled and the one before it, whose frame may still
be open and prefill its route-free prompt with 1.5's guidance), each row a copy of its own (not a view holding the
whole call's output), on the prefix's device (Alpamayo 1.5 at its pixel budget: 16 images x up to 192 tokens x 4096
x (1 + 3 DeepStack) in bf16, ~100 MB a window); off, only the last whole window's call (its route-free prompt
reads it again)."""

from __future__ import annotations

from collections import OrderedDict

import torch

from ...errors import ConfigError, expect


class VisionCache:
    def __init__(self, windows: int = 2):
        expect(isinstance(windows, int) and windows >= 1, ConfigError,
               f"vision cache windows={windows!r}: expected >= 1 (the windows whose images stay encoded)")
        self.windows = windows
        self.kept: OrderedDict = OrderedDict()   # key -> (rows (n, H), DeepStack rows (k, n, H)), while exact
        self.exact: bool | None = None           # None: not decided for `shape` yet
        self.why, self.shape, self.new_per_window = "not probed yet: no window has repeated the one before", None, 0
        self.previous: tuple[set, object] = (set(), None)   # the last prompt's keys and shape
        self.last_whole = None                   # (keys, rows) of the last whole-window call: the same window again
                                                 # (1.5's route-free prompt) takes them, exact whatever the kernels
        self.encoded = self.reused = 0           # images of the last prompt through the tower (probe included) / kept
        self.encoded_total = self.prompts = 0

    def encode(self, model, prompt) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """model: the Qwen3-VL model (vlm.model); prompt: with image_keys -> the image features (N, H) in prompt
        order and one (N, H) DeepStack addition per layer, as get_image_features' concatenated outputs."""
        keys = list(prompt.image_keys)
        expect(len(keys) == prompt.image_grid_thw.shape[0], ConfigError,
               f"{len(keys)} image keys for {prompt.image_grid_thw.shape[0]} images: one key per image is needed")
        shape = (len(keys), tuple(map(tuple, prompt.image_grid_thw.tolist())))
        return self.encode_images(keys, shape, lambda index: self._call(model, prompt, index))

    def encode_images(self, keys: list, shape, call) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """keys: one per image in prompt order; shape: what makes two windows alike (images, their sizes); call(index):
        the images at `index` through the tower in one call -> per image (rows (n, H), DeepStack rows (k, n, H)).
        -> the features (N, H) and k DeepStack additions (N, H), as one call of the whole window gives them."""
        unique = list(dict.fromkeys(keys))
        missing = [k for k in unique if k not in self.kept]
        if self.exact and shape == self.shape and len(missing) in (0, self.new_per_window):
            if missing:   # 0: the same window again (1.5's route-free prompt)
                self._keep(missing, call([keys.index(k) for k in missing]))
            reused = sum(1 for k in keys if k not in missing)
            return self._done(keys, shape, [self.kept[k] for k in keys], len(missing), reused)
        if self.last_whole is not None and self.last_whole[0] == tuple(keys):   # the same window again: its call
            return self._done(keys, shape, self.last_whole[1], 0, len(keys))
        rows = call(range(len(keys)))                                                       # as the reference
        self.last_whole = (tuple(keys), rows)
        probed = self._decide(call, keys, unique, rows, shape) if shape != self.shape or self.exact is None else 0
        if self.exact:
            self._keep(keys, rows)
        else:
            self.kept.clear()
        return self._done(keys, shape, rows, len(keys) + probed, 0)

    def _decide(self, call, keys: list, unique: list, rows: list, shape) -> int:
        """Reuse on or off for this shape, from the images new since the last prompt (module docstring); -> the
        images the check ran through the tower."""
        before, before_shape = self.previous
        fresh = [k for k in unique if k not in before]
        if before_shape != shape or not 0 < len(fresh) < len(unique):
            self.exact, self.shape = None, None
            self.why = "not probed yet: no window has repeated part of the one before"
            return 0
        alone = call([keys.index(k) for k in fresh])
        gap = max(max(float((a - b).abs().max()) if a.numel() else 0.0 for a, b in zip(mine, rows[keys.index(k)]))
                  for k, mine in zip(fresh, alone))   # a family without DeepStack: its stack rows are empty
        self.exact, self.shape, self.new_per_window = gap == 0.0, shape, len(fresh)
        self.why = "" if self.exact else (
            f"the {len(fresh)} new images encoded alone differ from their rows in the whole window's call by "
            f"{gap:.1e} (the tower's kernels): every window encoded whole")
        return len(fresh)

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
        """Each key's rows, copied (a view would hold the whole call's output); a key listed twice: its first."""
        seen = set()
        for key, (main, stack) in zip(keys, rows):
            if key not in seen:
                seen.add(key)
                self.kept[key] = (main.clone(), stack.clone())

    def _done(self, keys: list, shape, rows: list, encoded: int, reused: int):
        for key in dict.fromkeys(keys):
            if key in self.kept:
                self.kept.move_to_end(key)
        while len(self.kept) > self.windows * len(set(keys)):
            self.kept.popitem(last=False)
        self.previous = (set(keys), shape)
        self.encoded, self.reused = encoded, reused
        self.encoded_total += encoded
        self.prompts += 1
        features = torch.cat([r for r, _ in rows])                                          # (N, H)
        return features, [torch.cat([d[i] for _, d in rows]) for i in range(rows[0][1].shape[0])]  # k x (N, H)

    def clear(self) -> None:
        self.kept.clear()
        self.last_whole = None
        self.exact, self.shape, self.previous = None, None, (set(), None)
