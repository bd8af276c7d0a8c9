"""``@record`` behaves as ``@dataclass`` does, on every record of gpudash.

Each record class is compared with a twin the standard library makes from the same fields
and flags: the same ``repr``, the same answers to ``==`` and ``hash`` (equal and unequal
field values), the same refusal to assign or delete a field when frozen. A method the
class writes itself is left alone, as ``dataclass`` leaves it.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from typing import Any

import pytest

import gpudash
from gpudash import record as record_module
from gpudash.record import record


def all_records() -> list[type]:
    """Every dataclass defined in gpudash (each module imported)."""
    found: dict[str, type] = {}
    for info in pkgutil.walk_packages(gpudash.__path__, "gpudash."):
        if info.name.endswith("__main__"):
            continue
        for value in vars(importlib.import_module(info.name)).values():
            if (isinstance(value, type) and value.__module__ == info.name
                    and "__dataclass_fields__" in vars(value)):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return [found[k] for k in sorted(found)]


RECORDS = all_records()


def test_every_dataclass_of_gpudash_is_a_record() -> None:
    """One way to write a record: a class made by ``dataclass`` itself would carry its
    methods again (the memory ``@record`` saves)."""
    assert len(RECORDS) > 100
    made_by_hand = [f"{c.__module__}.{c.__qualname__}" for c in RECORDS
                    if c.__repr__ is not record_module._repr
                    and c.__repr__.__code__.co_filename == "<string>"]
    assert made_by_hand == []


def _twin(cls: type) -> Any:
    """The standard library's dataclass of ``cls``'s fields and flags (``eq``: as asked of
    ``record``, which gives ``dataclass`` eq=False and writes its own)."""
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    specs = [(f.name, f.type, dataclasses.field(repr=f.repr, compare=f.compare, hash=f.hash))
             for f in dataclasses.fields(cls)]
    twin = dataclasses.make_dataclass(cls.__name__, specs, frozen=params.frozen,
                                      eq=hasattr(cls, "__record_compare__"))
    twin.__qualname__ = cls.__qualname__
    return twin


def _filled(cls: Any, values: list[Any]) -> Any:
    obj = object.__new__(cls)
    for f, value in zip(dataclasses.fields(cls), values, strict=True):
        object.__setattr__(obj, f.name, value)
    return obj


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_a_record_answers_as_its_dataclass_twin(cls: Any) -> None:
    twin = _twin(cls)
    n = len(dataclasses.fields(cls))
    base = [("v", i) for i in range(n)]
    a, b, ta, tb = (_filled(cls, base), _filled(cls, list(base)), _filled(twin, base),
                    _filled(twin, list(base)))
    if cls.__repr__ is record_module._repr:
        assert repr(a) == repr(ta)
    if cls.__eq__ is record_module._eq:
        assert (a == b) is (ta == tb) is True
        assert a.__eq__(object()) is NotImplemented
        for i in range(n):
            changed = [*base[:i], ("other",), *base[i + 1:]]
            c, tc = _filled(cls, changed), _filled(twin, changed)
            assert (a == c) is (ta == tc), dataclasses.fields(cls)[i].name
    if cls.__hash__ is None:
        assert twin.__hash__ is None
    elif cls.__hash__ is record_module._hash:
        assert hash(a) == hash(b) == hash(ta)
    if cls.__dataclass_params__.frozen and n:
        name = dataclasses.fields(cls)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(a, name, 1)
        with pytest.raises(dataclasses.FrozenInstanceError):
            delattr(a, name)


def test_a_method_the_class_writes_is_kept() -> None:
    @record
    class Named:
        name: str
        size: int = 0

        def __repr__(self) -> str:
            return f"<{self.name}>"

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Named) and other.name == self.name

    assert repr(Named("a", 1)) == "<a>"
    assert Named("a", 1) == Named("a", 2)
    assert hash(Named("a", 1)) != hash(Named("a", 2))  # frozen: dataclass's hash, as there


def test_records_as_the_standard_library_makes_them() -> None:
    @record
    class Point:
        x: int
        y: int = dataclasses.field(default=0, compare=False)
        note: str = dataclasses.field(default="", repr=False)

    @record(frozen=False)
    class Box:
        items: list[int] = dataclasses.field(default_factory=list)

    p = Point(1, 2, "n")
    assert repr(p) == "test_records_as_the_standard_library_makes_them.<locals>.Point(x=1, y=2)"
    assert p == Point(1, 3, "n") and hash(p) == hash(Point(1, 3, "n"))
    assert p != Point(2, 2, "n") and p != Point(1, 2)
    assert dataclasses.replace(p, x=5) == Point(5, note="n")
    assert Point.__slots__ == ("x", "y", "note")
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'x'"):
        p.x = 2  # type: ignore[misc]
    box = Box()
    box.items.append(1)
    box.items = [2]
    assert box == Box([2]) and box != Box([3])
    with pytest.raises(TypeError, match="unhashable"):
        hash(box)
    box.items = [box]  # type: ignore[list-item]
    assert repr(box).endswith("Box(items=[...])")
