#!/usr/bin/env bash
# Build ROS 2 message packages from .msg folders with the build tools already in VENV (colcon, ament_cmake,
# rosidl generators: ../shared/autoware_msgs/build_msgs.sh installs them) and install them into PREFIX
# (merge-install; PREFIX = VENV installs into the virtualenv itself, another folder makes an overlay).
#
#   scripts/build_msgs.sh VENV PREFIX NAME:VERSION:MSG_DIR[,MSG_DIR...]:DEP[,DEP...] ...
#
# Each package gets the .msg files of its MSG_DIRs (a later folder's file replaces an earlier one of the same
# name: how the newer CandidateTrajectory overrides the 1.12.1 one). About 20-40 s per package on 2 cores.
set -euo pipefail
VENV=$(cd "${1:?usage: build_msgs.sh VENV PREFIX PACKAGE...}" && pwd)
PREFIX=$(mkdir -p "${2:?usage: build_msgs.sh VENV PREFIX PACKAGE...}" && cd "$2" && pwd)
shift 2
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT

write_package() {  # NAME VERSION DIR DEPS(comma-separated)
  local name=$1 version=$2 dir=$3 deps=${4//,/ }
  {
    echo '<?xml version="1.0"?>'
    echo '<package format="3">'
    echo "  <name>$name</name><version>$version</version><description>$name (the messages this package uses)</description>"
    echo '  <maintainer email="none@example.com">hybrid_vla_ros</maintainer><license>Apache-2.0</license>'
    echo '  <buildtool_depend>ament_cmake</buildtool_depend><buildtool_depend>rosidl_default_generators</buildtool_depend>'
    for dep in $deps; do echo "  <depend>$dep</depend>"; done
    echo '  <exec_depend>rosidl_default_runtime</exec_depend>'
    echo '  <member_of_group>rosidl_interface_packages</member_of_group>'
    echo '  <export><build_type>ament_cmake</build_type></export>'
    echo '</package>'
  } > "$dir/package.xml"
  {
    echo 'cmake_minimum_required(VERSION 3.14)'
    echo "project($name)"
    echo 'find_package(ament_cmake REQUIRED)'
    echo 'find_package(rosidl_default_generators REQUIRED)'
    for dep in $deps; do echo "find_package($dep REQUIRED)"; done
    echo 'file(GLOB _msgs RELATIVE ${CMAKE_CURRENT_SOURCE_DIR} msg/*.msg)'
    echo "rosidl_generate_interfaces(\${PROJECT_NAME} \${_msgs} DEPENDENCIES $deps)"
    echo 'ament_export_dependencies(rosidl_default_runtime)'
    echo 'ament_package()'
  } > "$dir/CMakeLists.txt"
}

for spec in "$@"; do
  IFS=: read -r name version dirs deps <<< "$spec"
  d="$WORK/src/$name"; mkdir -p "$d/msg"
  for src in ${dirs//,/ }; do cp "$src"/*.msg "$d/msg/"; done
  write_package "$name" "$version" "$d" "$deps"
done
cd "$WORK"
if ! AMENT_PREFIX_PATH="$PREFIX:$VENV" CMAKE_PREFIX_PATH="$PREFIX:$VENV" "$VENV/bin/colcon" build --merge-install \
      --install-base "$PREFIX" --cmake-args -DPython3_EXECUTABLE="$VENV/bin/python" \
      -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF > "$WORK/build.log" 2>&1; then
  tail -40 "$WORK/build.log" >&2; echo "build_msgs: colcon build failed (log above)" >&2; exit 1
fi
echo "build_msgs: installed into $PREFIX: $(ls "$WORK/src" | tr '\n' ' ')"
