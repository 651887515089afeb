"""An Alpamayo release's suffix with its linears in int8 (engine/int8.py's Int8Linear: weights int8 per output
channel, activations per token, computed at each call; no calibration): the VLM blocks [lo, L) and the expert
layers [min(lo, L_e), L_e) it runs, each replaced by its quantized copy; lm_head, the norms and action_out_proj stay
fp32. With the cut at p, the split runs exactly what the unsplit release runs with layers [p, L) so quantized
(test_alpamayo_int8.py); how far that is from fp32 depends on the weights (docs/INTERFACES.md says what was
measured on the tiny release)."""

from __future__ import annotations

from ..int8 import Int8Linear, quantized_copy


def quantize_suffix(model, lo: int) -> int:
    """The model's VLM blocks [lo, L) and expert layers [min(lo, L_e), L_e) replaced in place by their int8 copies
    (read ones only: a layer still on the meta device is left as it is). -> layers quantized."""
    done = 0
    for layers in (model.vlm.model.language_model.layers, model.expert.layers):
        for index in range(min(lo, len(layers)), len(layers)):
            layer = layers[index]
            if any(p.is_meta for p in layer.parameters()) or is_quantized(layer):
                continue
            layers[index] = quantized_copy(layer)
            done += 1
    return done


def is_quantized(layer) -> bool:
    return any(isinstance(m, Int8Linear) for m in layer.modules())
