"""The driving simulator (ROS-free): synthetic road drives for training, and the closed-loop world (issue 41) in
which a car follows the newest plan the system has delivered, each mode's timing deciding when a plan takes
effect, scored by Bench2Drive-like metrics. Poses and their transforms: types.Pose2D.

    road.py     a road scene in the ego frame, its camera images and ground-truth driver; drives; the road's curves
    view.py     pictures of a recorded drive: paths over the camera image, a bird's-eye view
    world.py    road (curvature profile -> polyline), lead vehicle, traffic light, the scene seen from a pose
    car.py      kinematic bicycle + pure pursuit + speed P-controller on a world-frame plan
    timing.py   timing profiles (measured here, the paper's ORION figures, the planner's) -> per mode latency, period
    loop.py     one drive of one scenario under one mode: frames, plans delivered late, the car, the record
    external.py the world driven from outside (the ROS graph in the loop, ros/closed_loop/)
    metrics.py  route completion, infractions, driving score, comfort, minimum time to collision
    policy.py   the view a policy gets, the oracle (the drives' ground-truth driver), a view's camera frame
    animate.py  a GIF of one drive: the front camera beside the bird's-eye view
"""
