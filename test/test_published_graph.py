"""Published models' shapes served by the ROS graph from a recorded drive with geometry and a route (issue 38,
item 5): the drive on our intersection map (ros/bags/drives.py write_route_drive: odometry poses on the approach,
the LaneletRoute latched on Autoware's route topic, camera_info, /tf_static), replayed into the graph in one
process and in separate processes. Each model declares the frame context it needs (navigation; the route must
reach every frame or the frame is refused); every frame is answered, none refused, and the two runs publish the
same trajectories: the context crosses the shared-memory ring's codec as it crosses in process.

Served: SimLingo converted from its published `.pt` layout (test_published_simlingo.py), ReCogDrive converted from
its published VLM directory + planner `.ckpt` (test_published_recogdrive.py; served declaring navigation only:
the drive's readiness probe is stamped before any odometry, so a model that needs the pose and its history, as
the shipped mapping declares, would refuse it; here they reach the head where known, zeros where not), and ORION
and MindDrive converted from their whole mmcv `.pth` (front end + LLM + planner; test_published_orion_minddrive.py:
their shipped mappings declare cameras and navigation). ORION's converted plan through the graph follows the
route's turn: the same drive with the route to the left and to the right gives other trajectories."""

import numpy as np
import pytest
import torch

from ros_harness import TINY_OVERRIDES, recorded_back_and_demo

pytest.importorskip("autoware_planning_msgs.msg", reason="the real Autoware messages (scripts/setup.sh builds them)")
pytestmark = pytest.mark.slow

FRAMES = 5


def simlingo_checkpoint(tmp_path) -> str:
    """SimLingo's .pt layout (tiny), converted by the shipped mapping -> the checkpoint directory."""
    import json
    from hybrid_vla_ros.convert import convert_checkpoint
    from hybrid_vla_ros.model.checkpoint import save_checkpoint
    from hybrid_vla_ros.model.load import load_vla
    from published_layouts import simlingo_state
    from test_published_simlingo import mapping_for_tiny
    model = load_vla(preset="tiny-simlingo")
    saved = save_checkpoint(model, tmp_path / "saved")
    state, chat_config, image_token = simlingo_state(saved)
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "config.json").write_text(json.dumps(chat_config))
    torch.save(state, tmp_path / "pytorch_model.pt")
    convert_checkpoint("pth", tmp_path / "pytorch_model.pt", str(mapping_for_tiny(tmp_path, image_token, model.spec)),
                       tmp_path / "simlingo", config_dir=tmp_path / "base")
    return str(tmp_path / "simlingo")


def recogdrive_checkpoint(tmp_path) -> str:
    """ReCogDrive's VLM directory and planner .ckpt (tiny), converted by the shipped mapping -> the directory."""
    from hybrid_vla_ros.convert import convert_checkpoint
    from hybrid_vla_ros.model.checkpoint import save_checkpoint
    from hybrid_vla_ros.model.load import load_vla
    from published_layouts import INTERNVL3_FIELDS, internvl_chat_dir, recogdrive_ckpt
    from test_published_recogdrive import mapping_for_tiny
    model = load_vla(preset="tiny-recogdrive")
    saved = save_checkpoint(model, tmp_path / "saved")
    image_token = internvl_chat_dir(saved, tmp_path / "vlm", **INTERNVL3_FIELDS)
    recogdrive_ckpt(saved, tmp_path / "planner.ckpt")
    mapping = mapping_for_tiny(tmp_path, image_token, model.spec, context=["navigation"])   # the probe: above
    convert_checkpoint("internvl_chat", tmp_path / "vlm", str(mapping), tmp_path / "recogdrive",
                       also=[("ckpt", tmp_path / "planner.ckpt")])
    return str(tmp_path / "recogdrive")


def mmcv_checkpoint(name: str, tmp_path) -> str:
    """ORION's / MindDrive's whole mmcv .pth (tiny), converted by the shipped mapping -> the checkpoint directory."""
    from hybrid_vla_ros.convert import convert_checkpoint
    from hybrid_vla_ros.model.checkpoint import save_checkpoint
    from hybrid_vla_ros.model.load import load_vla
    from test_published_orion_minddrive import PRESETS, WRITERS, tiny_sets
    model = load_vla(preset=PRESETS[name])
    saved = save_checkpoint(model, tmp_path / "saved")
    WRITERS[name](saved, tmp_path / f"{name}.pth", model.spec, model.scene_encoder.state_dict())
    convert_checkpoint("pth", tmp_path / f"{name}.pth", name, tmp_path / name, config_dir=saved,   # shipped mapping,
                       sets=tiny_sets(name, model.spec))                                         # tiny sizes set
    return str(tmp_path / name)


CONVERTED = {"simlingo": simlingo_checkpoint, "recogdrive": recogdrive_checkpoint,
             "orion": lambda tmp_path: mmcv_checkpoint("orion", tmp_path),
             "minddrive": lambda tmp_path: mmcv_checkpoint("minddrive", tmp_path)}


def refused(summary: dict) -> dict:
    """Every node's non-zero rejection counts (context_missing_navigation, ...)."""
    return {f"{node}.{reason}": n for node, counts in summary["rejected"].items() for reason, n in counts.items()
            if int(n)}


def graph_overrides(model: dict, cameras: list[str], map_path) -> dict:
    overrides = {node: {**values, **model} for node, values in TINY_OVERRIDES.items()}
    overrides["hybrid_vla_prefix"].update(camera_topics=cameras, image_transport="raw", input_policy="lossless",
                                          map_path=str(map_path), route_lookahead_m=10.0)
    return overrides


@pytest.mark.parametrize("model", ["orion", "minddrive", "simlingo", "recogdrive"])
def test_a_published_shape_is_served_from_a_drive_with_geometry_and_a_route(model, domain, tmp_path):
    from hybrid_vla_ros.model.load import load_vla
    from hybrid_vla_ros.ros.bags.drives import write_route_drive
    from hybrid_vla_ros.ros.bags.storage import bag_info
    from hybrid_vla_ros.ros.demo import drive_graph
    from hybrid_vla_ros.ros.launch_support.bringup import graph_params, write_combined_config
    from hybrid_vla_ros.ros.topics import ROUTE_TOPIC
    params_model = {"model.checkpoint": CONVERTED[model](tmp_path)} if model in CONVERTED else {"model.preset": model}
    spec = load_vla(preset=params_model.get("model.preset"), checkpoint=params_model.get("model.checkpoint")).spec
    assert "navigation" in spec.context
    cameras = [f"/test/cam{i}/image" for i in range(spec.num_cameras)]
    bag = write_route_drive(tmp_path / "drive", spec, cameras, tmp_path / "intersection.osm", turn="left",
                            frames=FRAMES, compressed=False)
    info = bag_info(bag)
    assert info.types[ROUTE_TOPIC] == "autoware_planning_msgs/msg/LaneletRoute"
    assert info.types["/tf_static"] == "tf2_msgs/msg/TFMessage"
    params = graph_params(overrides=graph_overrides(params_model, cameras, tmp_path / "intersection.osm"))
    one, traj_one = drive_graph(bag, params, record_to=tmp_path / "recorded", settle_s=30)
    assert one["frames_published"] == one["trajectories"] == FRAMES and not refused(one), one
    config = write_combined_config(params, tmp_path / "graph.yaml")
    many, traj_many = drive_graph(bag, params, processes=True, config=str(config), settle_s=60)
    assert many["trajectories"] == FRAMES and many["transports"] == ["shm"] and not refused(many), many
    assert sorted(traj_one) == sorted(traj_many)
    for stamp in traj_one:
        np.testing.assert_allclose(traj_many[stamp], traj_one[stamp], atol=1e-5, err_msg=f"frame {stamp}")
    recorded_back_and_demo(one, sorted(traj_one), bag, config, tmp_path)


def test_the_route_s_turn_changes_converted_orion_s_plan_in_the_graph(domain, tmp_path):
    from hybrid_vla_ros.model.load import load_vla
    from hybrid_vla_ros.ros.bags.drives import write_route_drive
    from hybrid_vla_ros.ros.demo import drive_graph
    from hybrid_vla_ros.ros.launch_support.bringup import graph_params
    params_model = {"model.checkpoint": mmcv_checkpoint("orion", tmp_path)}
    spec = load_vla(checkpoint=params_model["model.checkpoint"]).spec
    cameras = [f"/test/cam{i}/image" for i in range(spec.num_cameras)]
    params = graph_params(overrides=graph_overrides(params_model, cameras, tmp_path / "intersection.osm"))
    plans = {}
    for turn in ("left", "right"):   # the same frames and poses, the route through the junction to either side
        bag = write_route_drive(tmp_path / f"drive_{turn}", spec, cameras, tmp_path / "intersection.osm", turn=turn,
                                frames=FRAMES, compressed=False)
        summary, plans[turn] = drive_graph(bag, params, settle_s=30)
        assert summary["trajectories"] == FRAMES and not refused(summary), summary
    assert sorted(plans["left"]) == sorted(plans["right"])
    for stamp in plans["left"]:   # ORION's mode: turn left's (0) against turn right's (1), every frame
        assert not np.allclose(plans["left"][stamp], plans["right"][stamp]), f"frame {stamp}"
