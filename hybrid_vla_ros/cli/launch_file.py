"""`hybrid-vla launch FILE|[PACKAGE] NAME [name:=value ...]`: a launch file run by launch.LaunchService, the
engine behind `ros2 launch`, from an environment without a ROS install (the PyPI wheels' venv).

The package is laid out for the run as `colcon build` installs it (ros/launch_support/install_layout.py), in a temporary
prefix put first on AMENT_PREFIX_PATH, so `$(find-pkg-share hybrid_vla_ros)` and `<node pkg="hybrid_vla_ros"
exec=...>` resolve to this installation's files and executables. ros2 launch's Python packages (launch,
launch_ros, launch_xml; not on PyPI) come from an installed ROS 2 where importable, else from the copy in
../shared/vendor/ros2_launch beside this checkout. Ctrl-C (SIGINT) stops every process as `ros2 launch` does, and
so does SIGTERM (the LaunchService runs in a child process that gets it as SIGINT: run_as_child); the command's
exit code is the LaunchService's."""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
from contextlib import contextmanager
from pathlib import Path

from .. import stop
from ..errors import ConfigError, expect
from ..ros.launch_support.install_layout import PACKAGE, laid_out_prefix, source_root

LAUNCH_PACKAGES = ("launch", "launch_ros", "launch_xml")


def parse_argument(text: str) -> tuple[str, str]:
    """'name:=value' -> (name, value); an empty value is a value (`data_path:=`)."""
    name, sep, value = text.partition(":=")
    expect(bool(sep) and bool(name.strip()) and name == name.strip(), ConfigError,
           f"launch argument {text!r}: expected name:=value")
    return name, value


def split_command(tokens: list[str]) -> tuple[str | None, str, list[tuple[str, str]]]:
    """FILE [args] | PACKAGE NAME [args] | NAME [args] (a launch file this package ships) -> (package, or None
    for a path; the file; [(name, value)]). A path: has a separator or is an existing file."""
    first, rest = tokens[0], tokens[1:]
    if os.sep in first or Path(first).expanduser().is_file():
        return None, first, [parse_argument(t) for t in rest]
    if rest and "=" not in rest[0]:
        return first, rest[0], [parse_argument(t) for t in rest[1:]]
    return PACKAGE, first, [parse_argument(t) for t in rest]


def find_in_package(package: str, name: str, prefix: Path) -> Path:
    """The launch file `name` of `package`: directly in its share/ or anywhere below it (as ros2 launch)."""
    if package == PACKAGE:
        share = prefix / "share" / PACKAGE
    else:
        from ament_index_python.packages import PackageNotFoundError, get_package_share_directory
        try:
            share = Path(get_package_share_directory(package))
        except PackageNotFoundError:
            raise ConfigError(f"package {package!r} not found (AMENT_PREFIX_PATH: a ROS 2 install sourced?)") from None
    found = sorted(share.rglob(Path(name).name)) if Path(name).name == name else [share / name]
    found = [p for p in found if p.is_file()]
    shipped = sorted(p.name for p in (share / "launch").glob("*") if p.is_file())
    expect(bool(found), ConfigError, f"no launch file {name!r} in package {package!r}"
           + (f" (its launch files: {', '.join(shipped)})" if shipped else ""))
    expect(len(found) == 1, ConfigError, f"{name!r} is more than one file in {package!r}: give its path")
    return found[0]


def resolve_file(package: str | None, name: str, prefix: Path) -> Path:
    if package is None:
        path = Path(name).expanduser()
        expect(path.is_file(), ConfigError, f"no launch file {name!r} (no such file)")
        return path.resolve()
    return find_in_package(package, name, prefix)


def launch_packages() -> Path | None:
    """Make launch/launch_ros/launch_xml importable. -> the vendored folder used, or None (installed ones).
    A namespace portion (the source tree's launch/ folder, when run from the checkout) does not count."""
    def installed(name):
        spec = importlib.util.find_spec(name)
        return spec is not None and spec.origin is not None
    if all(installed(n) for n in LAUNCH_PACKAGES):
        return None
    vendor = source_root().parent / "shared" / "vendor" / "ros2_launch"
    expect((vendor / "site").is_dir(), ConfigError,
           "ros2 launch's Python packages (launch, launch_ros, launch_xml) are not importable: source a ROS 2 "
           f"install, or keep the project's shared/ beside the checkout ({vendor} is missing); PyPI has no "
           "wheels of them")
    sys.path.append(str(vendor / "site"))   # after the environment's own: an installed package wins
    return vendor


def ament_prefix_path(prefix: Path, vendor: Path | None) -> str:
    """This run's prefix first, then the vendored launch's (its grammar file), then what the environment had."""
    paths = [str(prefix)] + ([str(vendor / "ament")] if vendor else [])
    return os.pathsep.join(paths + [p for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p])


def warn_undeclared(path: Path, arguments: list[tuple[str, str]]) -> None:
    """A name the file does not declare is passed on (as ros2 launch does) with a warning: likely a typo."""
    from launch.launch_description_sources import AnyLaunchDescriptionSource
    try:
        described = AnyLaunchDescriptionSource(str(path)).try_get_launch_description_without_context()
        declared = {a.name for a in described.get_launch_arguments()} if described else None
    except Exception as exc:  # noqa: BLE001 - the run below reports a broken file with launch's own words
        print(f"hybrid-vla launch: could not read {path.name}'s arguments: {exc}", file=sys.stderr)
        return
    for name, _ in arguments:
        if declared is not None and name not in declared:
            print(f"hybrid-vla launch: warning: {path.name} declares no argument {name!r} "
                  f"(its arguments: {', '.join(sorted(declared))})", file=sys.stderr)


def _note_signal(signum, _frame) -> None:
    stop.request(signal.Signals(signum).name)


@contextmanager
def signals_to_launch():
    """While the LaunchService runs, SIGINT and SIGTERM only reach it (through the wakeup fd it sets), never
    end this process themselves: the stop handler's third signal would exit at once and leave the nodes."""
    previous = {s: signal.signal(s, _note_signal) for s in stop.STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_service(path: Path, arguments: list[tuple[str, str]]) -> int:
    from launch import LaunchDescription, LaunchService
    from launch.actions import IncludeLaunchDescription
    from launch.launch_description_sources import AnyLaunchDescriptionSource
    service = LaunchService(argv=[f"{k}:={v}" for k, v in arguments], noninteractive=True)
    service.include_launch_description(LaunchDescription([IncludeLaunchDescription(
        AnyLaunchDescriptionSource(str(path)), launch_arguments=arguments)]))
    with signals_to_launch():
        return service.run()


CHILD_ENV = "HYBRID_VLA_LAUNCH_CHILD"


def run_as_child(argv: list[str]) -> int:
    """The LaunchService in a child process; this one turns SIGTERM into the SIGINT launch handles (launch itself
    takes SIGTERM as "cancel the run" and leaves its processes running: launch_service.py's own warning), so
    `systemctl stop`, `docker stop` or `timeout` stop every node as Ctrl-C does. -> the child's exit code."""
    import subprocess
    child = subprocess.Popen([sys.executable, "-m", "hybrid_vla_ros.cli", "launch", *argv],
                             env={**os.environ, CHILD_ENV: "1"})

    def forward(signum, _frame) -> None:
        if signum == signal.SIGTERM or child.poll() is None:
            child.send_signal(signal.SIGINT)
    previous = {s: signal.signal(s, forward) for s in stop.STOP_SIGNALS}
    try:
        while True:
            try:
                return child.wait()
            except InterruptedError:
                continue
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def cmd_launch(args) -> int:
    if not os.environ.get(CHILD_ENV):
        split_command(args.target)   # a malformed argument: refused here, in one line
        return run_as_child(args.target)
    package, name, arguments = split_command(args.target)
    vendor = launch_packages()
    with laid_out_prefix() as prefix:
        os.environ["AMENT_PREFIX_PATH"] = ament_prefix_path(prefix, vendor)
        path = resolve_file(package, name, prefix)
        warn_undeclared(path, arguments)
        print(f"hybrid-vla launch: {path} ({'launch from ' + str(vendor) if vendor else 'installed launch'}; "
              f"{PACKAGE} laid out in {prefix})", file=sys.stderr, flush=True)
        return run_service(path, arguments)


def register(sub) -> None:
    p = sub.add_parser("launch", help="run a launch file as `ros2 launch` does, without a ROS install: FILE, "
                                      "or PACKAGE FILE, or the name of a launch file this package ships; then "
                                      "name:=value arguments")
    p.add_argument("target", nargs="+", metavar="FILE|PACKAGE FILE [name:=value ...]",
                   help="e.g. hybrid_vla_diffusion_seat.launch.xml use_sim_time:=true")
    p.set_defaults(func=cmd_launch)
