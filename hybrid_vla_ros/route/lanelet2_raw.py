"""A loaded lanelet2 map -> plain lists (each lanelet's id, bound points, turn_direction, neighbours), with
nothing but lanelet2 and the standard library, so that it also runs alone in a child process: map_bytes.py
decodes Autoware's vector map there, where a corrupt archive can fail only the child, never the node.

    python lanelet2_raw.py MAP.bin OUT.json MEMORY_BYTES

loads lanelet2's binary map (the boost archive autoware_map_msgs/LaneletMapBin carries) with at most
MEMORY_BYTES more address space than the interpreter holds once lanelet2 is imported, and writes raw_lanes()
as JSON. Exit 0; 2: lanelet2 refused the data; 3: the data asked for more memory than that (a corrupt count).
The reason goes to stderr.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

EXIT_REFUSED, EXIT_MEMORY = 2, 3


def has_local_xy(ll_map) -> bool:
    """Whether every point of the lanelet2 map carries Autoware's local_x / local_y tags."""
    points = list(ll_map.pointLayer)
    return bool(points) and all("local_x" in p.attributes and "local_y" in p.attributes for p in points)


def _xy(point, local: bool) -> list:
    if local:
        return [float(point.attributes["local_x"]), float(point.attributes["local_y"])]
    return [float(point.x), float(point.y)]


def raw_lanes(ll_map) -> dict:
    """{"local": map-frame points from local_x/local_y (else the points' x, y), "lanes": [{id, left, right
    (bound points [[x, y], ...]), turn (the turn_direction tag or ""), successors, lefts, rights (ids)}]}.
    Neighbours from a routing graph for vehicles, German rules: lanelet2's only rule set; Autoware builds its
    graph the same way."""
    from lanelet2 import routing, traffic_rules
    local = has_local_xy(ll_map)
    rules = traffic_rules.create(traffic_rules.Locations.Germany, traffic_rules.Participants.Vehicle)
    graph = routing.RoutingGraph(ll_map, rules)

    def ids(*found) -> list:
        return [int(ll.id) for ll in found if ll is not None]

    lanes = [{"id": int(ll.id), "left": [_xy(p, local) for p in ll.leftBound],
              "right": [_xy(p, local) for p in ll.rightBound],
              "turn": str(ll.attributes["turn_direction"]) if "turn_direction" in ll.attributes else "",
              "successors": ids(*graph.following(ll)), "lefts": ids(graph.left(ll), graph.adjacentLeft(ll)),
              "rights": ids(graph.right(ll), graph.adjacentRight(ll))} for ll in ll_map.laneletLayer]
    return {"local": local, "lanes": lanes}


def limit_memory(extra_bytes: int) -> None:
    """Cap this process's address space at what it holds now plus extra_bytes (Linux; elsewhere no cap)."""
    import resource
    try:
        with open("/proc/self/status") as f:
            held = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    except (OSError, StopIteration, ValueError):
        return
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = held + extra_bytes if hard == resource.RLIM_INFINITY else min(hard, held + extra_bytes)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))


def main(src: str, out: str, memory_bytes: int) -> int:
    from lanelet2 import io   # noqa: F401 (before the cap: the import's own address space is not the data's)
    limit_memory(memory_bytes)
    try:
        raw = raw_lanes(io.load(src))
    except MemoryError:
        print(f"it asks for more than {memory_bytes >> 20} MiB (a corrupt length or count)", file=sys.stderr)
        return EXIT_MEMORY
    except (RuntimeError, ValueError, OverflowError) as exc:   # lanelet2's and boost's errors, bad local_x
        print(" ".join(str(exc).splitlines()[:4]) or type(exc).__name__, file=sys.stderr)
        return EXIT_REFUSED
    Path(out).write_text(json.dumps(raw))
    return 0


if __name__ == "__main__":
    here = Path(__file__).resolve().parent   # run as a script: this folder's modules must not shadow others
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
