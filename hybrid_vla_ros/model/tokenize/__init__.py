"""How a frame becomes token ids: the byte prompt layout (tokens.py), a checkpoint's tokenizer or the byte
prompt behind one interface (prompt.py), and waypoint steps as action tokens (action_tokens.py)."""
