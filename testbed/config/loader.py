"""Strict conversion of plain data (YAML, JSON) into frozen dataclasses.

An unknown key or a wrong type is a `SpecError` whose message starts with the path of the
bad field (`links.buffer_pkts: expected an integer, got 'x'`). A field whose type is a
class with a `registry` mapping (the experiments' base) is converted to the registered
subclass its `type` key names. The same loader reads a spec (YAML), the controller's
per-phase configuration (JSON) and what the controller hands back (its state file, its
answers to commands, the PFC app's event log: `replies.py`), so both sides of the process
boundary agree on every type and default. `to_data` and `to_text` write a dataclass back
as plain data or as a CSV row's cells; `from_text` reads such a row (every cell text).
"""
from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

T = TypeVar("T")


class SpecError(ValueError):
    """A spec is invalid; the message starts with the path of the bad field."""


def _type_name(tp: Any) -> str:
    return {int: "an integer", float: "a number", bool: "true/false", str: "a string",
            dict: "a mapping", list: "a list"}.get(tp, str(tp))


def _fits(tp: Any, value: Any) -> bool:
    """Whether `value` has the shape of type `tp` (a union's arm): a mapping for a
    dataclass or a dict, a string for a str or a Literal, and so on."""
    if isinstance(tp, type) and dataclasses.is_dataclass(tp) or tp is dict \
            or typing.get_origin(tp) is dict:
        return isinstance(value, dict)
    if typing.get_origin(tp) is list:
        return isinstance(value, list)
    if tp is str or typing.get_origin(tp) is Literal:
        return isinstance(value, str)
    if tp is bool:
        return isinstance(value, bool)
    if tp in (int, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return True


def _arm_name(tp: Any) -> str:
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return f"a mapping ({', '.join(f.name for f in dataclasses.fields(tp))})"
    return _type_name(typing.get_origin(tp) or tp)


def convert(tp: Any, value: Any, path: str) -> Any:
    """`value` as type `tp`, or SpecError naming `path`."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) > 1:  # `str | Program`: the arm the value's shape fits
            for arm in inner:
                if _fits(arm, value):
                    return convert(arm, value, path)
            raise SpecError(f"{path}: expected {' or '.join(_arm_name(a) for a in inner)}, "
                            f"got {value!r}")
        return convert(inner[0], value, path)
    if origin is Literal:
        if value not in args:
            raise SpecError(f"{path}: must be one of {', '.join(map(str, args))} (got {value!r})")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise SpecError(f"{path}: expected a list, got {type(value).__name__}")
        return [convert(args[0], v, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise SpecError(f"{path}: expected a mapping, got {type(value).__name__}")
        if len(args) == 2:
            return {convert(args[0], _key(args[0], k), f"{path}.{k}"):
                    convert(args[1], v, f"{path}.{k}") for k, v in value.items()}
        return dict(value)
    # the experiments' base (not a dataclass: `type` says which); a concrete one nested in
    # another spec is read as itself
    if (isinstance(tp, type) and isinstance(getattr(tp, "registry", None), dict)
            and not dataclasses.is_dataclass(tp)):
        return registered(tp, value, path)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return from_data(tp, value, path)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SpecError(f"{path}: expected a number, got {value!r}{_yaml_number_hint(value)}")
        if not math.isfinite(value):
            raise SpecError(f"{path}: must be a finite number (got {value})")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"{path}: expected an integer, got {value!r}")
        return value
    if tp in (bool, str):
        if not isinstance(value, tp):
            raise SpecError(f"{path}: expected {_type_name(tp)}, got {value!r}")
        return value
    raise SpecError(f"{path}: unsupported field type {tp}")


def _yaml_number_hint(value: Any) -> str:
    """YAML 1.1 reads `1e6` (no dot) as text: say how to write it as a number."""
    try:
        float(value)
    except (TypeError, ValueError):
        return ""
    return " (YAML reads an exponent without a dot as text: write 1.0e+6, not 1e6)"


def _key(tp: Any, key: Any) -> Any:
    """JSON writes integer keys as strings: read them back as integers."""
    if tp is int and isinstance(key, str) and key.lstrip("-").isdigit():
        return int(key)
    return key


def registered(base: type, data: Any, path: str) -> Any:
    """An instance of the type registered under `data['type']` in `base.registry` (an
    experiment's spec type)."""
    registry: dict[str, type] = base.registry  # type: ignore[attr-defined]
    if not isinstance(data, dict) or "type" not in data:
        raise SpecError(f"{path}.type: required (one of {', '.join(registry)})")
    cls = registry.get(data["type"])
    if cls is None:
        raise SpecError(f"{path}.type: unknown experiment {data['type']!r} "
                        f"(one of {', '.join(registry)})")
    return from_data(cls, data, path)


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """A dataclass's resolved field types, once per class: resolving them is most of the
    cost of reading a record (40,301 PFC events took 5.4 s, 0.9 s with this)."""
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    return hints


def from_data(cls: type[T], data: Any, path: str = "") -> T:
    """An instance of the dataclass `cls` from a mapping, every field converted strictly."""
    if not isinstance(data, dict):
        raise SpecError(f"{path or 'spec'}: expected a mapping, got {type(data).__name__}")
    hints = _hints(cls)
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    names = [f.name for f in fields]
    for key in data:
        if key not in names:
            raise SpecError(f"{path + '.' if path else ''}{key}: unknown key "
                            f"(known: {', '.join(names)})")
    kwargs = {}
    for f in fields:
        fpath = f"{path}.{f.name}" if path else f.name
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise SpecError(f"{fpath}: required")
            continue
        kwargs[f.name] = convert(hints[f.name], data[f.name], fpath)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise SpecError(f"{path or 'spec'}: {exc}") from None


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping is an error (PyYAML
    keeps the last one silently). Keys merged in with `<<` may still be overridden."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: the base class says so
                continue
            if first is not None:
                raise SpecError(f"line {line}: duplicate key {key!r} (first on line {first})")
            seen[key] = line
        return super().construct_mapping(node, deep)


def read_yaml(path: str | Path) -> Any:
    """A YAML file's data, or SpecError (the caller names the file): unreadable, not UTF-8
    text, not YAML, or a mapping with a key given twice."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader)
    except OSError as exc:
        raise SpecError(f"cannot read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at "
                        f"offset {exc.start})") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"not valid YAML ({' '.join(str(exc).split())})") from None


def load_json(cls: type[T], path: str | Path) -> T:
    """A dataclass written by `dump_json`, read back with the same strict conversion."""
    return from_data(cls, json.loads(Path(path).read_text()), "")


def to_data(obj: Any, omit_none: bool = False) -> Any:
    """A dataclass (and the dataclasses, lists and mappings in it) as plain data, fields in
    their order, as `dataclasses.asdict`. `omit_none`: a field whose default is None and
    whose value is None is left out, so that a record says only what happened (a reroute
    of a port has no `routing`; a refused command no `changes`)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_data(getattr(obj, f.name), omit_none)
                for f in dataclasses.fields(obj)
                if not (omit_none and f.default is None and getattr(obj, f.name) is None)}
    if isinstance(obj, (list, tuple)):
        return [to_data(v, omit_none) for v in obj]
    if isinstance(obj, dict):
        return {k: to_data(v, omit_none) for k, v in obj.items()}
    return obj


def dump_json(obj: Any, path: str | Path, indent: int | None = 1,
              omit_none: bool = False) -> None:
    """Write a dataclass as JSON atomically (a reader never sees half a file); `indent`
    None writes it on one line, `omit_none` as `to_data`."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(target.suffix + ".tmp")
    tmp.write_text(json.dumps(to_data(obj, omit_none), indent=indent, default=str))
    tmp.replace(target)


def _parse_text(tp: Any, text: str, path: str) -> Any:
    """A CSV cell as the value `convert` expects for `tp` (an int, float or str field,
    optional or not, or a Literal of strings)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _parse_text(inner[0], text, path)
    if tp is int:
        try:
            return int(text)
        except ValueError:
            raise SpecError(f"{path}: expected an integer, got {text!r}") from None
    if tp is float:
        try:
            return float(text)
        except ValueError:
            raise SpecError(f"{path}: expected a number, got {text!r}") from None
    if tp is str or typing.get_origin(tp) is Literal:
        return text
    raise SpecError(f"{path}: unsupported column type {tp}")


def from_text(cls: type[T], row: Mapping[str | None, Any], path: str = "",
              columns: Mapping[str, str] | None = None) -> T:
    """An instance of the dataclass `cls` from a CSV row (column -> cell text, as
    `csv.DictReader` gives it): each cell parsed as its field's type, an empty or missing
    cell being the field's default (None for an optional one), then converted strictly by
    `from_data`. `columns`: field -> column name where the two differ (a column named by a
    Python keyword)."""
    names = columns or {}
    hints = _hints(cls)
    field_of = {names.get(f.name, f.name): f.name
                for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    data = {}
    for column, text in row.items():
        name = field_of.get(column) if column is not None else None
        if column is None or name is None:
            raise SpecError(f"{path + '.' if path else ''}{column}: unknown column "
                            f"(known: {', '.join(field_of)})")
        if text is None or text == "":
            continue
        data[name] = _parse_text(hints[name], text, f"{path}.{column}" if path else column)
    return from_data(cls, data, path)


def to_text(obj: Any) -> list[str]:
    """A dataclass's fields, in their order, as CSV cells (None empty): what `from_text`
    reads back."""
    return ["" if (v := getattr(obj, f.name)) is None else str(v)
            for f in dataclasses.fields(obj)]
