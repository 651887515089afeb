"""Measurement, apart from the runtime: the modes benchmark, the per-block profile, the load-step scenario,
and the one report module (percentiles, JSON, tables, plots) that the demo's summary also uses."""
