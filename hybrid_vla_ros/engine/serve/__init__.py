"""The one serving loop of a prefix whose suffix answers back (ROS-free): loop.py (frames in, what is sent and awaits
an answer, answers routed to it, deadlines) and policy.py (what runs next: a frame a forward, or ActionFlow's packing).
The action-token prefix (engine/actionflow/prefix_server.py) and the Alpamayo prefix (engine/expert_serve/prefix_server.py)
both run on it; a waypoint prefix sends and never waits for an answer (engine/pipeline/flight.py bounds its frames)."""
