"""Settings given by name, as a Kafka user passes them (``Client(bootstrap_servers=...)``,
``client.producer(enable_idempotence=True)``), checked where they enter.

A config is a frozen dataclass whose fields carry Tidelog's names; kafka-python's names are
accepted as aliases of them where the two differ. A setting that is no field, a feature Tidelog
does not have, a setting that belongs elsewhere (a connection setting given to a producer), or
a value of the wrong type fails as a ``ConfigurationError`` naming the setting, never as the
dataclass's ``TypeError`` or a comparison's deep inside ``__post_init__``.
"""

from __future__ import annotations

import collections.abc
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from tidelog.errors import ConfigurationError

C = TypeVar("C")

#: The connection settings (``ClientConfig.of``): what ``Client``, ``AdminClient`` and a
#: ``Producer`` of its own take for the connections, by kafka-python's names where it has them.
CLIENT_SETTINGS = frozenset({
    "bootstrap", "bootstrap_servers", "client_id", "request_timeout_ms", "retry_backoff_ms",
    "retry_backoff_max_ms", "observers", "security_protocol", "ssl_cafile", "ssl_certfile",
    "ssl_keyfile",
})


def config_from(
    cls: type[C],
    what: str,
    settings: Mapping[str, Any],
    *,
    aliases: Mapping[str, str] | None = None,
    not_built: Mapping[str, str] | None = None,
    elsewhere: Mapping[str, str] | None = None,
) -> C:
    """`cls` built from `settings`, `aliases` mapping Kafka's names to the fields'. `what`
    names the config in errors ("producer"); `not_built` maps a setting of a feature Tidelog
    lacks to what the feature is, `elsewhere` a setting of another config to where it goes."""
    aliases = aliases or {}
    fields: dict[str, Any] = {}
    given: dict[str, str] = {}
    known = set(cls.__dataclass_fields__)  # type: ignore[attr-defined]  # a dataclass
    for name, value in settings.items():
        field = aliases.get(name, name)
        if field not in known:
            if not_built and name in not_built:
                raise ConfigurationError(f"{name}: Tidelog's {what} has no {not_built[name]}")
            if elsewhere and name in elsewhere:
                raise ConfigurationError(f"{name} is {elsewhere[name]}")
            names = sorted(known | set(aliases))
            raise ConfigurationError(
                f"unknown {what} setting {name!r}; the settings are {', '.join(names)}"
            )
        if field in fields:
            raise ConfigurationError(
                f"{given[field]} and {name} are the same setting: give one of them"
            )
        fields[field], given[field] = value, name
    return cls(**fields)


def check_types(config: Any, aliases: Mapping[str, str] | None = None) -> None:
    """Raise ConfigurationError for a field of the dataclass `config` whose value does not
    have the field's annotated type (a bool is no int, and neither is a float or a string of
    digits: Kafka's int settings refuse them too). Called first in ``__post_init__``, so the
    range checks after it compare values of the right type; `aliases` (Kafka's name -> the
    field) lets the error name the setting as the caller may have spelled it."""
    by_field = {field: name for name, field in (aliases or {}).items()}
    cls: Any = type(config)
    for name, hint in _hints(cls).items():
        value = getattr(config, name)
        if not _is_a(value, hint):
            shown = name if name not in by_field else f"{name} ({by_field[name]})"
            raise ConfigurationError(
                f"{shown} must be {_describe(hint)}, got {value!r:.80} "
                f"({type(value).__name__})"
            )


@functools.cache
def _hints(cls: Any) -> dict[str, Any]:
    return {
        name: hint for name, hint in typing.get_type_hints(cls).items()
        if name in cls.__dataclass_fields__
        and typing.get_origin(hint) is not typing.ClassVar
    }


def _is_a(value: object, hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_is_a(value, arg) for arg in typing.get_args(hint))
    if hint is Any:
        return True
    if hint is None or hint is type(None):
        return value is None
    if origin is collections.abc.Callable or hint is collections.abc.Callable:
        return callable(value)
    if origin is not None:
        return isinstance(value, origin)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, hint)


def _describe(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(arg) for arg in typing.get_args(hint))
    if hint is None or hint is type(None):
        return "None"
    if origin is collections.abc.Callable or hint is collections.abc.Callable:
        return "a callable"
    name = getattr(origin or hint, "__name__", str(hint))
    return _ARTICLED.get(name, f"a {name}")


_ARTICLED = {"int": "an int", "float": "a number", "bool": "a bool"}
