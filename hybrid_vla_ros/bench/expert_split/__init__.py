"""The Alpamayo split (engine/expert_split) measured on a reduced Alpamayo 1.5 built from a config (seeded weights,
nothing read from disk); `hybrid-vla bench --preset alpamayo-bench` (cli/bench/expert_split.py) drives it.

reduced.py       the reduced model and one frame's inputs
phases.py        `--scenario split-phases`: native (run_reference) vs split-serial, per phase, one frame at a time
decode_heavy.py  `--scenario decode-heavy` (the preset's default): native vs serial vs pipelined across frames
"""

PRESET = "alpamayo-bench"   # the reduced model's preset name (the CLI reads it here without importing torch)
