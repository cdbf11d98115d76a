"""Dataclasses to and from JSON from their declared fields: round trips, older and newer files, errors."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ptebuild.jsonable import Jsonable, JsonShapeError


class Colour(str, enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True)
class Point(Jsonable):
    x: float
    y: float = 0.0


@dataclass(frozen=True)
class Own:
    """A class that writes its own JSON (not its fields)."""

    value: int

    def to_json(self) -> dict:
        return {"v": self.value}

    @classmethod
    def from_json(cls, data: dict) -> Own:
        return cls(int(data["v"]))


@dataclass(frozen=True)
class Shape(Jsonable):
    name: str
    colour: Colour
    points: tuple[Point, ...] = ()
    tags: dict[str, int] = field(default_factory=dict)
    parent: Point | None = None
    own: Own | None = None
    note: str = ""


def test_a_value_round_trips_through_json_text():
    shape = Shape("tri", Colour.BLUE, (Point(1.0, 2.0), Point(3.5)), {"a": 1}, Point(0.5), Own(7), "n")
    data = json.loads(json.dumps(shape.to_json()))
    assert data["colour"] == "blue" and data["own"] == {"v": 7} and data["points"][1] == {"x": 3.5, "y": 0.0}
    assert Shape.from_json(data) == shape


def test_older_files_read_with_defaults_and_newer_keys_are_ignored():
    assert Shape.from_json({"name": "s", "colour": "red", "a_later_field": [1]}) == Shape("s", Colour.RED)
    assert Shape.from_json({"name": "s", "colour": "red", "note": None}) == Shape("s", Colour.RED)  # null: the default
    assert Point.from_json({"x": 2}) == Point(2.0)  # an integer for a float


@pytest.mark.parametrize(("data", "words"), [
    ({"colour": "red"}, "Shape.name: missing"),
    ({"name": "s", "colour": "green"}, "Shape.colour: 'green' is not one of 'red', 'blue'"),
    ({"name": "s", "colour": "red", "points": [{"x": "1"}]}, "Shape.points[0].x: expected a number, found '1'"),
    ({"name": "s", "colour": "red", "tags": {"a": True}}, "Shape.tags.a: expected int, found True"),
    ({"name": "s", "colour": "red", "points": {}}, "Shape.points: expected an array, found dict"),
])
def test_a_wrong_value_is_named_by_its_path(data, words):
    with pytest.raises(JsonShapeError) as raised:
        Shape.from_json(data)
    assert str(raised.value) == words


@given(st.builds(Point, st.floats(allow_nan=False), st.floats(allow_nan=False)))
def test_any_point_round_trips(point):
    assert Point.from_json(json.loads(json.dumps(point.to_json()))) == point
