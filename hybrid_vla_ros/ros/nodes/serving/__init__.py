"""What the stage nodes do the same way for every model kind (waypoints, action tokens, Alpamayo releases; issue 51's
one serving path): the prefix's input for the suffix's answers, the suffix's output of a finished trajectory."""
