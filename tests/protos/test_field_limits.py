"""Every string, bytes, repeated and map field of the link has a size, and a message over it is refused naming the field."""

from __future__ import annotations

import pytest
from google.protobuf import symbol_database

from protos import field_limits
from protos import robot_link_pb2 as pb
from protos.env_spec import StateField, default_bounds
from protos.field_limits import (
    LIMITS,
    TRANSPORT_BYTES,
    FieldTooLarge,
    check_sizes,
    robot_id_key,
    robot_id_problem,
)


def test_every_sized_field_of_the_link_has_a_limit_and_no_limit_is_stale():
    fields = field_limits.sized_fields()
    assert sorted(fields) == sorted(LIMITS)
    assert len(fields) > 40


def _message_class(full_field_name: str):
    message_name = full_field_name.rpartition(".")[0]
    return symbol_database.Default().GetSymbol(message_name)


@pytest.mark.parametrize("name", sorted(LIMITS))
def test_a_field_over_its_limit_is_refused_naming_it(name):
    cls = _message_class(name)
    field = cls.DESCRIPTOR.fields_by_name[name.rpartition(".")[2]]
    limit = LIMITS[name]
    if cls.DESCRIPTOR.GetOptions().map_entry:  # a map's key or value: through its EnvSpec
        message = pb.EnvSpec()
        key, value = ("k" * (limit + 1), "v") if field.name == "key" else ("k", "v" * (limit + 1))
        message.metadata[key] = value
        with pytest.raises(FieldTooLarge, match="metadata"):
            check_sizes(message)
        return
    message = cls()
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        for i in range(limit + 1):
            getattr(message, field.name)[f"k{i}"] = "v"
    elif field.is_repeated:
        count = limit[0] if isinstance(limit, tuple) else limit
        container = getattr(message, field.name)
        if field.message_type is not None:
            for _ in range(count + 1):
                container.add()
        elif field.type == field.TYPE_STRING:
            container.extend(["x"] * (count + 1))
        else:
            container.extend([0] * (count + 1))
        if isinstance(limit, tuple):  # and an item too long, within the count
            longer = cls()
            getattr(longer, field.name).append("x" * (limit[1] + 1))
            with pytest.raises(FieldTooLarge, match=f"{field.name} has an item of"):
                check_sizes(longer)
    elif field.type == field.TYPE_BYTES:
        if limit >= TRANSPORT_BYTES:  # bounded by gRPC's receive limit and checked against the spec
            return
        setattr(message, field.name, b"x" * (limit + 1))
    else:
        setattr(message, field.name, "x" * (limit + 1))
    with pytest.raises(FieldTooLarge, match=rf"^{field.name} has \d+ "):
        check_sizes(message)
    check_sizes(cls())  # an empty one passes


def test_nested_fields_are_named_by_their_path():
    message = pb.AgentMessage(observation=pb.Observation(transition=pb.Transition(safety_events=["x"] * 33)))
    with pytest.raises(
        FieldTooLarge, match=r"^observation\.transition\.safety_events has 33 items, over the limit of 32"
    ):
        check_sizes(message)


def test_robot_ids_are_plain_ascii_and_unique_regardless_of_case():
    for good in ("twin-0", "franka_left.2", "UR5e"):
        assert robot_id_problem(good) is None
    for bad in ("", "a b", "twin-0 ", "twin-\u0430", "twin\0", ".hidden", "x" * 65):
        assert robot_id_problem(bad) is not None
    assert robot_id_key("Honest-A") == robot_id_key("honest-a")


def test_state_fields_get_bounds_by_kind_unless_declared():
    assert default_bounds("cube_quat") == (-1.01, 1.01)
    assert default_bounds("tcp_pos") == (-100.0, 100.0)
    assert default_bounds("wrist_force") == (-1e4, 1e4)
    assert StateField("tcp_pos", 3, low=-2.0).bounds == (-2.0, 100.0)
