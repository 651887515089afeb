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
echo "setup: done ($VENV, ROS $DISTRO: $("$VENV/bin/python" -c 'import torch, transformers, rclpy; print("torch", torch.__version__, "transformers", transformers.__version__, "rclpy", rclpy.__file__.split("/site-packages")[0])'))"
