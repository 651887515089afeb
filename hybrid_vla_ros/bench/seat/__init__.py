"""`hybrid-vla seat-report BAG`: how a recorded planner output fills the diffusion planner's seat (no ROS here).

From the candidate sets a bag holds (read by bench/seat/bag.py): the publish rate, points and horizon of each
candidate, how old each set's stamp is when it arrives and what the stamp is (publish time, the camera frame's,
the input odometry's), and the share of a 10 Hz consumer's ticks at which the newest set is within a 0.2 s window
(what autoware_trajectory_concatenator would hold): timing.py computes it, table.py prints and plots it.
"""
