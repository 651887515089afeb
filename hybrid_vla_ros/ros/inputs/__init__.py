"""What a frame takes at the prefix besides its cameras: the ego's acceleration (acceleration_input.py), the route
and its navigation (route_input.py), and the frame's context of camera intrinsics, /tf_static, ego pose and history
(context_input.py). Each subscribes on the prefix node, matches by the frame's stamp and counts what is missing;
the node files that build them stay in ros/nodes/."""
