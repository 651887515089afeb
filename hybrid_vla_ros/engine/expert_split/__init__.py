"""Alpamayo 1 / 1.5 split at a cut p between a prefix side (vision, embeddings, VLM blocks [0, p) and their
KV cache, expert layers [0, p), action_in_proj) and a suffix side (VLM blocks [p, L), norm, lm_head, the seeded
sampler, expert layers [p, L_e), action_out_proj, the Euler updates, the trajectory), ROS-free. Only the
crossings of crossings.py pass between them; the result equals model/plugins/alpamayo's run_reference exactly.

crossings.py   what crosses, per kind, with its shapes and the checks on arrival
blocks.py      the per-layer pieces both sides run (VLM blocks, expert layers, heads) over their own cache
prefix.py      the prefix side
suffix.py      the suffix side
runner.py      one frame serially: AlpamayoSplit / run_split, crossings logged, timings per side and phase
frames.py      several frames through the split, each side on its own pinned thread; frames in flight overlap
verify.py      `hybrid-vla verify` for an Alpamayo model: split vs unsplit at every cut, with and without guidance

Measured by bench/expert_split/ (`hybrid-vla bench --preset alpamayo-bench`).
"""

from .runner import AlpamayoSplit, Crossing, SplitResult, run_split  # noqa: F401
