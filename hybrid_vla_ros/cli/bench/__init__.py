"""Measurement commands: `hybrid-vla bench` (the modes side by side, or a scenario) and `hybrid-vla memory`
(profile: cli/profile.py).

options.py       both commands' options (register)
modes.py         bench: which scenario runs, and the modes side by side
scenarios.py     load-step, chunk-curve, preprocess, suffix-dtypes, action-tokens, faults
expert_split.py  the reduced Alpamayo (--preset alpamayo-bench): decode-heavy and split-phases
memory.py        memory
"""

from .options import register  # noqa: F401
