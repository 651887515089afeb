"""An Alpamayo release's suffix in int8 (issue 51, item 2's dtype cell for the Alpamayo rows): the suffix's VLM
blocks and expert layers with their linears in int8 (engine/expert_split/int8.py), the prefix in fp32. The split at
every cut equals the unsplit release with the same layers quantized, bit for bit, with and without 1.5's guidance;
the suffix node with `dtype: int8` serves a release in the graph exactly so. How far int8 lands from fp32 is the
weights' matter: on these tiny random releases the plan moves by metres (docs/INTERFACES.md gives the figures), so
no test bounds it; a real release's is not measured here."""

import copy

import pytest
import torch

from hybrid_vla_ros.engine.expert_split.int8 import is_quantized, quantize_suffix
from hybrid_vla_ros.engine.expert_split.runner import run_split
from hybrid_vla_ros.engine.expert_split.verify import REASONING_TOKENS, difference, flow_settings, synthetic_inputs
from hybrid_vla_ros.model.load import load_vla
from hybrid_vla_ros.model.plugins.alpamayo.decode import Sampling
from hybrid_vla_ros.model.plugins.alpamayo.reference import run_reference
from test_alpamayo_graph import camera_sets, check, expected, graph_params, one_process
from test_alpamayo_graph import releases  # noqa: F401 (the fixture)


@pytest.mark.parametrize("preset, guided", [("tiny-alpamayo-r1", False), ("tiny-alpamayo-1.5", True)])
def test_the_split_with_an_int8_suffix_equals_the_release_with_those_layers_in_int8(preset, guided):
    model = load_vla(preset=preset)
    sampling, flow = Sampling(max_new_tokens=REASONING_TOKENS), flow_settings(model, guided)
    blocks, expert_layers = model.num_blocks, len(model.expert.layers)
    moved = 0.0
    for p in range(blocks + 1):
        quantized = copy.deepcopy(model)
        assert quantize_suffix(quantized, p) == (blocks - p) + (expert_layers - min(p, expert_layers))
        text = quantized.vlm.model.language_model.layers
        assert [is_quantized(layer) for layer in text] == [i >= p for i in range(blocks)]
        assert [is_quantized(layer) for layer in quantized.expert.layers] == [
            i >= min(p, expert_layers) for i in range(expert_layers)]
        for seq in range(2):
            inputs = synthetic_inputs(model, seq, guided)
            want = run_reference(quantized, inputs, seq, sampling, flow, guided)
            assert difference(run_split(quantized, inputs, p, seq, sampling, flow, guided).result, want) == 0.0
            moved = max(moved, difference(want, run_reference(model, inputs, seq, sampling, flow, guided)))
    assert moved > 0.0   # int8 ran: the plans are not fp32's
    print(f"{preset}: int8 suffix vs fp32, largest plan difference {moved:.2f} m")   # docs/INTERFACES.md (33)


@pytest.mark.slow
def test_the_suffix_node_serves_a_release_in_int8_exactly_as_the_release_with_its_layers_in_int8(releases, domain):
    params = graph_params(releases["r1"], False)
    params["hybrid_vla_suffix"]["dtype"] = "int8"
    with one_process(params) as (graph, driver):
        suffix, prefix = graph.nodes["hybrid_vla_suffix"], graph.nodes["hybrid_vla_prefix"]
        served = suffix.serving.model
        assert served is not prefix.serving.model   # the suffix's own model, its layers from the cut quantized
        layers = served.vlm.model.language_model.layers
        assert [is_quantized(layer) for layer in layers] == [False, False, True, True]
        reference = load_vla(checkpoint=str(releases["r1"]))
        quantize_suffix(reference, 2)                # cut 2, zone [2, 2]: the layers the suffix runs
        sets = camera_sets(2)
        paths, infos = driver.drive(sets, timeout_s=60)
        check(paths, infos, expected(reference, sets, False))
        assert ("dtype", 0, "int8") in [c[:3] for c in suffix._extra_checks()]
        assert {p.dtype for p in served.parameters() if not p.is_meta} == {torch.float32}


def test_an_int8_suffix_with_a_cut_that_may_move_is_refused_at_configure_with_the_reason():
    """The prefix runs [0, p) in fp32 and the int8 suffix quantizes from the zone's start: with a zone wider than
    one cut, the layers between would change precision with the cut, and the plan with them."""
    from types import SimpleNamespace
    from hybrid_vla_ros.errors import ConfigError
    from hybrid_vla_ros.ros.nodes.serving.alpamayo.weights import side_model
    params = {"dtype": "int8", "chunks": "1", "warm_standby": False, "numa_node": -1}
    node = SimpleNamespace(params=params, model=load_vla(preset="tiny-alpamayo-r1"), cores=None, zone=(1, 3))
    with pytest.raises(ConfigError, match=r"dtype=int8: .*fixed cut.*\[1, 3\]"):
        side_model(node, "suffix")
    node.zone = (2, 2)
    assert is_quantized(side_model(node, "suffix").vlm.model.language_model.layers[2])
