#!/usr/bin/env bash
# Create a virtual environment with everything hybrid_vla_ros needs, offline-safe and idempotent.
#   ./scripts/setup.sh            ROS 2 kilted wheels into .venv (the default)
#   ./scripts/setup.sh jazzy      ROS 2 jazzy wheels (ros-jazzy-*, rclpy 7.1.x) into .venv-jazzy
# torch: keeps a torch that is already importable (a GPU user's CUDA build); otherwise torch==2.13.0.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DISTRO=${1:-kilted}
case "$DISTRO" in
  kilted) VENV=.venv ;;
  jazzy) VENV=.venv-jazzy ;;
  *) echo "setup: unknown ROS distro '$DISTRO' (kilted or jazzy; Humble has no PyPI wheels)" >&2; exit 2 ;;
esac
if [ ! -x "$VENV/bin/python" ]; then
  if "$PY" -c "import torch" 2>/dev/null; then
    echo "setup: using the torch already installed for $PY ($("$PY" -c 'import torch; print(torch.__version__)'))"
    "$PY" -m venv --system-site-packages "$VENV"
  else
    "$PY" -m venv "$VENV"
  fi
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  "$VENV/bin/python" -m pip install -q torch==2.13.0
fi
REQUIREMENTS=requirements.txt
if [ "$DISTRO" != kilted ]; then  # the same ROS packages under the distro's wheel names
  REQUIREMENTS=$(mktemp)
  sed -E "s/^ros-([a-z0-9-]+)/ros-$DISTRO-\1/" requirements.txt > "$REQUIREMENTS"
fi
"$VENV/bin/python" -m pip install -q -r "$REQUIREMENTS"
"$VENV/bin/python" -m pip install -q --no-deps -e .
# The real Autoware message packages for the tests (autoware_planning_msgs, autoware_internal_planning_msgs),
# built from ../shared/autoware_msgs where it exists (a machine with Autoware installed has its own), then
# the few this package adds (msgs/README.md: autoware_vehicle_msgs' TurnIndicatorsCommand, Float64Stamped,
# tf2_msgs' TFMessage: /tf_static has no wheel here; autoware_map_msgs' LaneletMapBin: ~/input/vector_map)
# into the venv and the newer CandidateTrajectory into an overlay, $VENV/newer_msgs (test_message_versions.py).
# Rebuilt when the definitions or the recipes change.
AUTOWARE_MSGS=../shared/autoware_msgs
if [ -f "$AUTOWARE_MSGS/build_msgs.sh" ]; then
  SUM=$(cat "$AUTOWARE_MSGS"/build_msgs.sh "$AUTOWARE_MSGS"/*/msg/*.msg scripts/build_msgs.sh \
        $(find msgs -name '*.msg' | sort) | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$VENV/.autoware_msgs.sha256" 2>/dev/null)" != "$SUM" ] || ! "$VENV/bin/python" -c \
      "import autoware_planning_msgs.msg, autoware_internal_planning_msgs.msg, autoware_vehicle_msgs.msg, tf2_msgs.msg, autoware_map_msgs.msg" 2>/dev/null; then
    START=$SECONDS
    # build_msgs.sh stops (grep finds nothing, pipefail) in a venv whose wheel CMake files it already fixed
    # (a rebuild): one file naming /opt/python/ keeps it going
    GUARD="$VENV/share/hvla_build_msgs_guard"
    mkdir -p "$GUARD/cmake" && echo "# /opt/python/" > "$GUARD/cmake/guard.cmake"
    bash "$AUTOWARE_MSGS/build_msgs.sh" "$DISTRO" "$VENV" 2> >(grep -v "^WARNING: Location" >&2) || {
      rm -rf "$GUARD"; echo "setup: building the Autoware messages failed" >&2; exit 1; }
    rm -rf "$GUARD"
    bash scripts/build_msgs.sh "$VENV" "$VENV" \
        autoware_vehicle_msgs:1.12.0:msgs/autoware_vehicle_msgs/msg:builtin_interfaces \
        autoware_internal_debug_msgs:1.12.1:msgs/autoware_internal_debug_msgs/msg:builtin_interfaces \
        tf2_msgs:0.41.0:msgs/tf2_msgs/msg:geometry_msgs \
        autoware_map_msgs:1.12.0:msgs/autoware_map_msgs/msg:std_msgs || {
      echo "setup: building this package's message definitions failed" >&2; exit 1; }
    rm -rf "$VENV/newer_msgs"
    bash scripts/build_msgs.sh "$VENV" "$VENV/newer_msgs" "autoware_internal_planning_msgs:1.12.1:$AUTOWARE_MSGS/autoware_internal_planning_msgs/msg,msgs/newer/autoware_internal_planning_msgs/msg:autoware_planning_msgs,autoware_vehicle_msgs,builtin_interfaces,geometry_msgs,std_msgs,unique_identifier_msgs" || {
      echo "setup: building the newer CandidateTrajectory failed" >&2; exit 1; }
    echo "$SUM" > "$VENV/.autoware_msgs.sha256"
    echo "setup: Autoware messages built into $VENV in $((SECONDS - START)) s"
  fi
else
  echo "setup: no $AUTOWARE_MSGS here: the tests that need the real Autoware messages will skip"
fi
echo "setup: done ($VENV, ROS $DISTRO: $("$VENV/bin/python" -c 'import torch, transformers, rclpy; print("torch", torch.__version__, "transformers", transformers.__version__, "rclpy", rclpy.__file__.split("/site-packages")[0])'))"
