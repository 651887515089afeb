"""ament_python package; also pip-installable (pip install -e .) next to the ROS 2 PyPI wheels."""

from glob import glob

from setuptools import find_packages, setup

PACKAGE = "hybrid_vla_ros"

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(exclude=["test", "test.*"]),
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.py") + glob("launch/*.xml")),
        (f"share/{PACKAGE}/config", glob("config/*.yaml")),
        (f"share/{PACKAGE}/schema", glob("schema/*.schema.json")),
    ],
    package_data={PACKAGE: ["data/sample_drive/*", "data/road_drive/*", "data/models/*/*", "data/dds/*",
                           "convert/mappings/*.yaml"]},
    include_package_data=True,
    install_requires=["setuptools", "numpy", "pyyaml", "safetensors", "transformers>=5.0", "torch",
                      "matplotlib", "rosbags>=0.10.9", "jsonschema", "psutil"],
    zip_safe=False,
    maintainer="hybrid_vla_ros developers",
    maintainer_email="dev@hybrid-vla-ros.invalid",
    description="Block-partitioned VLA inference (GPU prefix, CPU suffix) as ROS 2 nodes for Autoware",
    license="Apache-2.0",
    tests_require=["pytest"],
    entry_points={
        "console_scripts": [
            "hybrid-vla = hybrid_vla_ros.cli:main",
            "hybrid_vla_prefix = hybrid_vla_ros.ros.launch_support.entry:prefix_main",
            "hybrid_vla_suffix = hybrid_vla_ros.ros.launch_support.entry:suffix_main",
            "hybrid_vla_scheduler = hybrid_vla_ros.ros.launch_support.entry:scheduler_main",
            "hybrid_vla_graph = hybrid_vla_ros.ros.launch_support.entry:graph_main",
        ],
    },
)
