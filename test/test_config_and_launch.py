"""Shipped configuration: YAML valid against each node's schema, schemas in sync with the parameter table,
the launch file parses and names only installed executables and existing config files."""

import ast
import json
import re
from pathlib import Path
from xml.etree import ElementTree

import jsonschema
import pytest
import yaml

from hybrid_vla_ros.errors import ConfigError
from hybrid_vla_ros.ros.params import NODE_PARAMS, load_node_params, markdown_table, node_schema

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("node", sorted(NODE_PARAMS))
def test_shipped_yaml_validates_against_the_node_schema(node):
    schema = json.loads((ROOT / "schema" / f"{node}.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.validate(yaml.safe_load((ROOT / "config" / f"{node}.param.yaml").read_text()), schema)


@pytest.mark.parametrize("node", sorted(NODE_PARAMS))
def test_shipped_schema_matches_the_parameter_table(node):
    assert json.loads((ROOT / "schema" / f"{node}.schema.json").read_text()) == node_schema(node), \
        "regenerate with: hybrid-vla schema --out schema --docs docs/INTERFACES.md"


def test_schema_rejects_out_of_range_and_unknown_values():
    schema = node_schema("hybrid_vla_prefix")
    data = yaml.safe_load((ROOT / "config" / "hybrid_vla_prefix.param.yaml").read_text())
    data["/**"]["ros__parameters"]["max_in_flight"] = 0
    with pytest.raises(jsonschema.ValidationError, match="0 is less than the minimum of 1"):
        jsonschema.validate(data, schema)
    data["/**"]["ros__parameters"]["max_in_flight"] = 2
    data["/**"]["ros__parameters"]["bogus"] = 1
    with pytest.raises(jsonschema.ValidationError, match="Additional properties"):
        jsonschema.validate(data, schema)


def test_param_loader_refuses_missing_and_out_of_range_values(tmp_path):
    data = yaml.safe_load((ROOT / "config" / "hybrid_vla_suffix.param.yaml").read_text())
    del data["/**"]["ros__parameters"]["numa_node"]
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"needs values for \['numa_node'\] \(no hidden defaults\)"):
        load_node_params(tmp_path / "a.yaml", "hybrid_vla_suffix")
    data["/**"]["ros__parameters"]["numa_node"] = 99
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="'numa_node'=99: above the maximum 63"):
        load_node_params(tmp_path / "b.yaml", "hybrid_vla_suffix")


def console_scripts():
    tree = ast.parse((ROOT / "setup.py").read_text())
    scripts = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and " = hybrid_vla_ros." in node.value:
            scripts.add(node.value.split(" = ")[0])
    return scripts


def test_launch_files_name_installed_executables_and_existing_configs():
    source = (ROOT / "launch" / "hybrid_vla.launch.py").read_text()
    tree = ast.parse(source)
    assert any(isinstance(n, ast.FunctionDef) and n.name == "generate_launch_description" for n in tree.body)
    imported = {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= {"launch", "launch_ros", "hybrid_vla_ros"}
    xml = ElementTree.parse(ROOT / "launch" / "hybrid_vla.launch.xml").getroot()
    executables = {n.get("exec") for n in xml.iter("node")}
    assert executables == {"hybrid_vla_prefix", "hybrid_vla_suffix", "hybrid_vla_scheduler", "hybrid_vla_graph"}
    assert executables <= console_scripts()
    defaults = " ".join(a.get("default", "") for a in xml.iter("arg"))
    configs = set(re.findall(r"(hybrid_vla_\w+\.param\.yaml)", defaults))
    assert configs == {f"{n}.param.yaml" for n in NODE_PARAMS}
    assert all((ROOT / "config" / c).is_file() for c in configs)
    setup = (ROOT / "setup.py").read_text()
    assert 'glob("launch/*.py") + glob("launch/*.xml")' in setup  # both installed


def test_package_xml_is_format_3_ament_python_with_dependencies():
    root = ElementTree.parse(ROOT / "package.xml").getroot()
    assert root.get("format") == "3" and root.findtext("name") == "hybrid_vla_ros"
    assert root.find("export/build_type").text == "ament_python"
    deps = {e.text for e in root if e.tag.endswith("depend")}
    assert {"rclpy", "sensor_msgs", "nav_msgs", "diagnostic_msgs", "lifecycle_msgs", "std_msgs",
            "launch_ros", "python3-pytest"} <= deps
    assert (ROOT / "resource" / "hybrid_vla_ros").is_file()


def test_the_suffix_ships_dtype_auto_and_a_boundary_dtype_that_follows_the_prefix():
    """bf16 where it is native (the start-up probe decides), for waypoint and action-token models alike; the
    boundary in whatever dtype the prefix computes in. Exactness tests set fp32 themselves (ros_harness)."""
    values = load_node_params(ROOT / "config" / "hybrid_vla_suffix.param.yaml", "hybrid_vla_suffix")
    assert (values["dtype"], values["boundary_dtype"]) == ("auto", "auto")
    from ros_harness import TINY_OVERRIDES
    assert TINY_OVERRIDES["hybrid_vla_suffix"]["dtype"] == "fp32"


def test_interfaces_doc_lists_every_parameter():
    doc = (ROOT / "docs" / "INTERFACES.md").read_text()
    for node, params in NODE_PARAMS.items():
        assert f"## Parameters of `{node}`" in doc
        assert markdown_table(node) in doc, f"the {node} table in docs/INTERFACES.md is out of date with params.py"


def test_rclpy_own_parameters_are_accepted_in_yaml_and_by_the_schema(tmp_path):
    data = yaml.safe_load((ROOT / "config" / "hybrid_vla_suffix.param.yaml").read_text())
    params = data["/**"]["ros__parameters"]
    params["use_sim_time"] = True
    params["qos_overrides"] = {"/planning/hybrid_vla/trajectory": {"publisher": {"depth": 5}}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    values = load_node_params(tmp_path / "s.yaml", "hybrid_vla_suffix")
    assert values["use_sim_time"] is True
    jsonschema.validate(data, json.loads((ROOT / "schema" / "hybrid_vla_suffix.schema.json").read_text()))
    params["use_sim_time"] = "yes"
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="'use_sim_time'='yes': expected bool"):
        load_node_params(tmp_path / "t.yaml", "hybrid_vla_suffix")


@pytest.mark.parametrize("name", ["", "   "])
def test_an_empty_generator_name_is_refused_by_the_loader_the_schema_and_the_node(tmp_path, name):
    import rclpy
    from rclpy.node import Node
    from hybrid_vla_ros.ros.launch_support.bringup import to_ros_parameters
    from hybrid_vla_ros.ros.nodes.parameters import ParameterTable
    data = yaml.safe_load((ROOT / "config" / "hybrid_vla_suffix.param.yaml").read_text())
    data["/**"]["ros__parameters"]["generator_name"] = name
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=f"'generator_name'='{name}': must not be empty"):
        load_node_params(tmp_path / "g.yaml", "hybrid_vla_suffix")
    with pytest.raises(jsonschema.ValidationError, match="generator_name|is too short|does not match"):
        jsonschema.validate(data, json.loads((ROOT / "schema" / "hybrid_vla_suffix.schema.json").read_text()))
    values = load_node_params(ROOT / "config" / "hybrid_vla_suffix.param.yaml", "hybrid_vla_suffix")
    assert values["generator_name"] == "hybrid_vla"  # the shipped default
    values["generator_name"] = name
    context = rclpy.Context()
    rclpy.init(context=context)
    node = Node("generator_name_check", context=context,
                parameter_overrides=to_ros_parameters("hybrid_vla_suffix", values))
    try:
        with pytest.raises(ConfigError, match=f"hybrid_vla_suffix parameter 'generator_name'='{name}': must not be empty"):
            ParameterTable(node, "hybrid_vla_suffix")
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)


def test_a_combined_parameter_file_never_uses_yaml_aliases_rcl_refuses_them(tmp_path):
    """Found starting the warm standby from a launch file: two nodes sharing one values dict were written as a
    YAML anchor + alias, and rcl refused the whole file ('Will not support aliasing')."""
    from hybrid_vla_ros.ros.launch_support.bringup import graph_params, write_combined_config
    params = graph_params()
    params["hybrid_vla_suffix_standby"] = params["hybrid_vla_suffix"]
    text = write_combined_config(params, tmp_path / "p.yaml").read_text()
    assert "&id" not in text and "*id" not in text and text.count("ros__parameters") == 4
