"""The suffix node in a process of its own, slower than a real-size CPU suffix: each frame's compute takes
SECONDS more (a sleep inside SuffixStage.run, on the suffix's compute thread, as a 7B stack's seconds of
torch ops would; the executor and the shared-memory reader's heartbeat thread go on beside it).

    python slow_suffix.py SECONDS --node hybrid_vla_suffix --config FILE [--pin CORES]   (bringup's arguments)
"""

import sys
import time


def main() -> int:
    seconds, argv = float(sys.argv[1]), sys.argv[2:]
    from hybrid_vla_ros.engine.stages import SuffixStage
    from hybrid_vla_ros.ros.launch_support import bringup
    run = SuffixStage.run

    def slow_run(self, state, *args, **kwargs):
        time.sleep(seconds)
        return run(self, state, *args, **kwargs)
    SuffixStage.run = slow_run
    return bringup.main(argv)


if __name__ == "__main__":
    sys.exit(main())
