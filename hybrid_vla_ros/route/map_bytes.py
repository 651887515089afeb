"""Autoware's /map/vector_map payload -> LaneMap (ROS-free).

autoware_map_msgs/LaneletMapBin `data` is a boost binary archive of the LaneletMap and the id counter, the
layout lanelet2's .bin writer uses. lanelet2 trusts every length and count in it: a corrupt one makes it
allocate without bound (one wrong byte in a 12 kB map: 23 GiB resident, then the kernel's out-of-memory
killer, when decoded in-process on a 23 GiB machine). So the data is decoded in a child process
(lanelet2_raw.py, which imports only lanelet2) with its address space capped: a corrupt archive fails the
child, with a reason, and never the node.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from ..errors import ConfigError, expect
from .lanes import LaneMap, _lanelet2, from_raw

DECODE_MEMORY_BASE = 1 << 30   # bytes of address space the decoder may add to what it holds after the import
DECODE_MEMORY_PER_BYTE = 256   # and per byte of data: a cap against corrupt counts, not a measured need
DECODE_TIMEOUT_S = 120.0
DECODER = Path(__file__).with_name("lanelet2_raw.py")   # run as a script: it imports only lanelet2


def _decode(src: Path, out: Path, memory: int) -> str:
    """Run lanelet2_raw.py on src -> "" when it wrote out, else why not."""
    try:
        proc = subprocess.run([sys.executable, str(DECODER), str(src), str(out), str(memory)],
                              capture_output=True, text=True, timeout=DECODE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"not decoded within {DECODE_TIMEOUT_S:.0f} s"
    if proc.returncode == 0:
        return ""
    why = (proc.stderr.strip().splitlines() or [""])[-1]
    if proc.returncode < 0:   # lanelet2 crashed on it (a corrupt archive can make it read anywhere)
        name = next((sig.name for sig in signal.Signals if sig == -proc.returncode), str(-proc.returncode))
        return f"lanelet2 crashed decoding it (signal {name})"
    return why or f"the decoder exited with {proc.returncode}"


def load_map_bytes(data: bytes) -> LaneMap:
    """LaneletMapBin `data` -> LaneMap; ConfigError saying why where it does not decode (empty, not a
    lanelet2 archive, a corrupt count, a lanelet without finite bounds)."""
    data = bytes(data)
    expect(len(data) > 0, ConfigError, "vector map: no data (an empty LaneletMapBin)")
    _lanelet2()   # ConfigError here, saying how to install it, where lanelet2 is missing
    memory = DECODE_MEMORY_BASE + DECODE_MEMORY_PER_BYTE * len(data)
    try:
        with tempfile.TemporaryDirectory(prefix="hvla_vector_map_") as tmp:
            src, out = Path(tmp) / "map.bin", Path(tmp) / "lanes.json"
            src.write_bytes(data)
            why = _decode(src, out, memory)
            expect(not why, ConfigError, f"vector map ({len(data)} bytes) is not a lanelet2 binary map: {why}")
            raw = json.loads(out.read_text())
    except OSError as exc:   # no room for the temporary files, no process to decode in
        raise ConfigError(f"vector map ({len(data)} bytes): not decoded here ({exc})") from None
    return from_raw(raw, "lanelet2 binary")
