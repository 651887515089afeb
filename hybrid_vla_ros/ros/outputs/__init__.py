"""What the suffix publishes besides the Trajectory, and where and when that trajectory is: the plan placed in the
output frame and re-timed to the present (present.py), the CandidateTrajectories of the generator-selector framework
(candidates.py) and the turn indicators (turn_signals.py). ros/nodes/serving/output.py builds and drives them."""
