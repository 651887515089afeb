"""The closed-loop world in the ROS graph (issue 41, item 4): world_node.py publishes /clock, the cameras and the
odometry of the simulator's world (sim/) and drives its car with the suffix's plans; run.py runs it beside the graph."""
