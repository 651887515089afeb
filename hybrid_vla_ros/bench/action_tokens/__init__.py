"""Benches of a model that decodes action tokens: modes.py, the default bench's native / serial / pipelined for it;
packs.py, `--head action-tokens`: ActionFlow's packs against sequential decoding, in depth."""
