"""``@record``: gpudash's dataclass, with its ``__repr__``, ``__eq__``, ``__hash__`` and
frozen ``__setattr__``/``__delattr__`` written once for every class instead of per class.

The standard library's ``@dataclass`` compiles those methods from source text for each
class: about 7 KB of code objects per frozen class, which stay in memory as long as the
class does. gpudash has over a hundred records (snapshots, plans, steps, reports,
settings): written per class, their methods were about 0.7 MB of the dashboard's resident
memory (measured on the stand-in, issue 30). Here ``dataclass`` still writes each class's
``__init__`` (and its slots); the other methods are shared functions that read the class's
fields, and behave as the generated ones do (``tests/test_record.py`` compares them with
the standard library's on every record of gpudash):

- ``repr``: ``Name(field=value, ...)`` of the fields with ``repr=True``, ``...`` where it
  recurses;
- ``==``: the same class and equal fields (``compare=True``), else ``NotImplemented``;
- ``hash`` (frozen): of those fields (or ``hash=True``); unhashable where not frozen;
- frozen: assigning or deleting a field raises ``FrozenInstanceError``.

A method written in the class's body is kept, as ``dataclass`` keeps it. A shared ``==``
or ``hash`` takes about twice as long as a generated one (``attrgetter`` reads each field
by name, where the generated code reads the slots directly: about 0.5 µs more for 16
fields); the dashboard calls them about 30 times a second (counted on the stand-in).
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable
from dataclasses import Field, FrozenInstanceError, dataclass, field, fields
from operator import attrgetter
from typing import Any, TypeVar, dataclass_transform, overload

__all__ = ["record"]

_T = TypeVar("_T", bound=type)


def _values(names: list[str]) -> Any:
    """The named fields' values of an instance, as the tuple ``dataclass`` compares and
    hashes: an ``attrgetter`` (C; not a descriptor, so read from the class it is not bound
    to the instance), or for one name or none a function (a static method)."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        only = names[0]
        return staticmethod(lambda obj: (getattr(obj, only),))
    return staticmethod(lambda _obj: ())


@reprlib.recursive_repr()
def _repr(self: Any) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__record_repr__)
    return f"{type(self).__qualname__}({shown})"


def _eq(self: Any, other: Any) -> Any:  # a bool, or NotImplemented
    if other.__class__ is self.__class__:
        key = self.__record_compare__
        return key(self) == key(other)
    return NotImplemented


def _hash(self: Any) -> int:
    return hash(self.__record_hash__(self))


def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    if "__record_frozen__" in type(self).__dict__ or name in type(self).__dataclass_fields__:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")
    object.__setattr__(self, name, value)


def _frozen_delattr(self: Any, name: str) -> None:
    if "__record_frozen__" in type(self).__dict__ or name in type(self).__dataclass_fields__:
        raise FrozenInstanceError(f"cannot delete field {name!r}")
    object.__delattr__(self, name)


def _finish(cls: type, *, frozen: bool, slots: bool, eq: bool) -> type:
    own = dict(cls.__dict__)  # what the class's body wrote, before dataclass adds to it
    explicit_hash = "__hash__" in own and not (own["__hash__"] is None and "__eq__" in own)
    made: Any = dataclass(cls, frozen=frozen, slots=slots, eq=False, repr=False)
    if "__repr__" not in own:
        made.__record_repr__ = tuple(f.name for f in fields(made) if f.repr)
        made.__repr__ = _repr
    if eq:
        compared = [f.name for f in fields(made) if f.compare]
        hashed = [f.name for f in fields(made) if f.hash or (f.hash is None and f.compare)]
        made.__record_compare__ = _values(compared)
        if "__eq__" not in own:
            made.__eq__ = _eq
        if not explicit_hash:
            if frozen:
                made.__record_hash__ = _values(hashed)
                made.__hash__ = _hash
            else:
                made.__hash__ = None
    if frozen:
        made.__record_frozen__ = True
        made.__setattr__ = _frozen_setattr
        made.__delattr__ = _frozen_delattr
    result: type = made
    return result


@overload
def record(cls: _T, /) -> _T: ...


@overload
def record(*, frozen: bool = True, slots: bool = True, eq: bool = True
           ) -> Callable[[_T], _T]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(field, Field))
def record(cls: Any = None, /, *, frozen: bool = True, slots: bool = True, eq: bool = True
           ) -> Any:
    """A dataclass (frozen, with slots, unless said otherwise) whose methods are shared."""
    if cls is None:
        return lambda c: _finish(c, frozen=frozen, slots=slots, eq=eq)
    return _finish(cls, frozen=frozen, slots=slots, eq=eq)
