"""Run a module as on a machine without Autoware: its message packages, even where built into this
environment, fail to import exactly as missing packages do (ModuleNotFoundError naming the package).

    python without_autoware.py -m MODULE [ARGS...]
"""

import importlib.abc
import runpy
import sys

HIDDEN = ("autoware_planning_msgs", "autoware_internal_planning_msgs", "autoware_auto_planning_msgs",
          "autoware_internal_debug_msgs", "autoware_vehicle_msgs", "autoware_map_msgs")


class HideAutoware(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named '{name}'", name=name)
        return None


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] != "-m":
        sys.exit(__doc__)
    sys.meta_path.insert(0, HideAutoware())
    module, sys.argv = sys.argv[2], [sys.argv[2], *sys.argv[3:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
