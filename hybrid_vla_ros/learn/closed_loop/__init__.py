"""Closed-loop driving (issue 41): a world in world coordinates whose camera frames are rendered from where the
ego is now, a kinematic car that follows the newest plan the system has delivered, each mode's timing
(native, serial, pipelined, chunked, pipelined + re-timing) deciding when a plan takes effect, and
Bench2Drive-like metrics. ROS-free (numpy; torch only inside the model policy).

    world.py    road (curvature profile -> polyline), lead vehicle, traffic light, the scene seen from a pose
    car.py      kinematic bicycle + pure pursuit + speed P-controller on a world-frame plan
    timing.py   timing profiles (measured here, the paper's ORION figures) -> per mode latency and period
    loop.py     one drive of one scenario under one mode: frames, plans delivered late, the car, the record
    metrics.py  route completion, infractions, driving score, comfort, minimum time to collision
    policy.py   the shipped model as a policy, and an oracle (the sim's own ground-truth driver)
    evaluate.py scenarios x profiles x modes -> the table, JSON, a bird's-eye plot
"""
