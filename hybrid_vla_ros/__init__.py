"""hybrid_vla_ros: block-partitioned VLA inference (GPU prefix, CPU suffix) for ROS 2 / Autoware."""

__version__ = "0.1.0"
