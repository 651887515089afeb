"""Per-block kernel measurements: where a block's time goes (profile), how near the roofline it runs (roofline),
and the CPU backends compared on it (backends). `hybrid-vla profile` (cli/profile.py) drives them."""
