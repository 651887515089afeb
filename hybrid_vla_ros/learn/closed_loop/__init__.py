"""Learning in the closed loop (issue 41): the simulator (sim/) drives, the model learns from and is judged by its
own drives. ROS-free.

    model_policy.py the shipped model as a policy of the simulator (the engine's stages, native cut)
    dagger.py       training frames from the model's own drives, labelled by the ground-truth driver (DAgger)
    evaluate.py     held-out scenarios x timing profiles x modes -> the table, JSON, a bird's-eye plot
"""
