"""A node's parameters as ROS sees them: declared typed from the table (ros/params.py) with their bounds as
descriptors, no defaults in code, run-time changes validated (Humble applies them from the validating callback)."""

from __future__ import annotations

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor, SetParametersResult
from rclpy.parameter import Parameter

from ...engine.pipeline.limits import AUTO
from ...engine.pipeline.worker import StageHealth
from ...errors import ConfigError, HybridVLAError, expect
from ..params import NODE_PARAMS, rclpy_own

PARAM_TYPES = {"int": Parameter.Type.INTEGER, "double": Parameter.Type.DOUBLE, "bool": Parameter.Type.BOOL,
               "string": Parameter.Type.STRING, "int_array": Parameter.Type.INTEGER_ARRAY,
               "string_array": Parameter.Type.STRING_ARRAY,
               "int_or_string": None}   # dynamic typing (a descriptor's dynamic_typing, Humble on): typed by value

def descriptor(spec) -> ParameterDescriptor:
    if PARAM_TYPES[spec.type] is None:   # declared without a type: an int or a string (spec.check refuses others)
        return ParameterDescriptor(dynamic_typing=True, description=spec.description, read_only=not spec.dynamic,
                                   additional_constraints=f"an integer in {spec.minimum:g}..{spec.maximum:g} or "
                                                          f"one of {list(spec.choices)}")
    d = ParameterDescriptor(type=PARAM_TYPES[spec.type].value, description=spec.description,  # Enum on jazzy
                            read_only=not spec.dynamic)
    if spec.choices:
        d.additional_constraints = f"one of {list(spec.choices)}"
    elif spec.nonempty:
        d.additional_constraints = "non-empty"
    if spec.minimum is not None and spec.maximum is not None:
        low = min(spec.minimum, AUTO) if spec.auto else spec.minimum  # AUTO: the table's check refuses (-1, min)
        if spec.type.startswith("int"):
            d.integer_range = [IntegerRange(from_value=int(low), to_value=int(spec.maximum), step=0)]
        elif spec.type == "double":
            d.floating_point_range = [FloatingPointRange(from_value=float(low),
                                                         to_value=float(spec.maximum), step=0.0)]
    return d


class ParameterTable:
    """Declares a node's parameters (typed, no defaults in code) and validates run-time changes."""

    def __init__(self, node, node_name: str, extra_check=None, on_change=None, health: StageHealth | None = None):
        self.node, self.specs = node, {p.name: p for p in NODE_PARAMS[node_name]}
        self.extra_check, self.on_change, self.health = extra_check, on_change, health
        for spec in self.specs.values():
            node.declare_parameter(spec.name, PARAM_TYPES[spec.type], descriptor(spec))
        missing = [n for n in self.specs if node.get_parameter(n).type_ == Parameter.Type.NOT_SET]
        expect(not missing, ConfigError,
               f"{node_name}: parameters {missing} have no value; pass the node's param file (no hidden defaults)")
        self.values = {}
        for name, spec in self.specs.items():
            value = node.get_parameter(name).value
            self.values[name] = spec.check(list(value) if spec.type.endswith("array") else value,
                                           f"{node_name} parameter")
        node.add_on_set_parameters_callback(self._validate)
        post_set = getattr(node, "add_post_set_parameters_callback", None)
        # Iron and newer apply after the change is accepted; Humble has no post-set callback, so there the
        # values are applied from the validating callback once every parameter of the change is valid.
        self._apply_in_validate = not callable(post_set)
        if not self._apply_in_validate:
            post_set(self._apply)

    def __getitem__(self, name: str):
        return self.values[name]

    def _validate(self, params) -> SetParametersResult:
        try:
            for param in params:
                if rclpy_own(param.name):
                    continue  # rclpy's own (use_sim_time, qos_overrides.*): rclpy validates and applies them
                spec = self.specs.get(param.name)
                expect(spec is not None, ConfigError, f"unknown parameter '{param.name}'")
                value = list(param.value) if spec.type.endswith("array") else param.value
                spec.check(value, "parameter")
                if self.extra_check:
                    self.extra_check(param.name, value)
        except HybridVLAError as exc:
            if self.health:
                self.health.reject("parameter")
            self.node.get_logger().warning(f"parameter change refused: {exc}")
            return SetParametersResult(successful=False, reason=str(exc))
        if self._apply_in_validate:
            self._apply(params)
        return SetParametersResult(successful=True)

    def _apply(self, params) -> None:
        for param in params:
            if rclpy_own(param.name):
                continue
            self.values[param.name] = param.value
            if self.on_change:
                self.on_change(param.name, param.value)
