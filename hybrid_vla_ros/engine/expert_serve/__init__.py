"""A split Alpamayo frame (engine/expert_split) served by two servers that share only bytes, ROS-free: the
engine of the prefix and suffix nodes for an Alpamayo release (ros/nodes/serving/alpamayo/).

envelope.py       which frame and message a crossing belongs to, and the settings a frame runs by, as bytes
prefix_server.py  frames in; prefill, decode feeds, route-free prompt and expert layers [0, p) answered per message
suffix_server.py  each forward message answered: tokens sampled, action states, the trajectory
frame_inputs.py   camera images, poses and prompt ids -> the release's inputs
"""
