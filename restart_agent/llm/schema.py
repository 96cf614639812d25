"""The structured answer the model must give: JSON schema (data file) and its validation.

The schema lives in `enrichment_schema.json` and is sent as the `json_schema` response
format. `validate()` checks a parsed answer against exactly that schema's rules (types,
required keys, enums, bounds, no extra keys) without a third-party validator, and turns
it into a plain dict; any deviation is a `MalformedAnswer` and the answer is not used.
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from typing import Any

SCHEMA_NAME = "relaunch_enrichment"
CLAIMS = ("explanation", "owner", "recovery_outlook")


class MalformedAnswer(ValueError):
    """The model's answer is not JSON, or does not match the schema."""


@cache
def schema() -> dict[str, Any]:
    text = resources.files(__package__).joinpath("enrichment_schema.json").read_text("utf-8")
    return json.loads(text)


def response_format_json_schema() -> dict[str, Any]:
    return {
        "type": "json_schema",
        "json_schema": {"name": SCHEMA_NAME, "strict": True, "schema": schema()},
    }


_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(.*)\n\s*```\s*$", re.DOTALL)


def parse(content: str | None) -> dict[str, Any]:
    """Parse and validate the model's message content."""
    if content is None or not content.strip():
        raise MalformedAnswer("empty answer")
    text = content
    fenced = _FENCE.match(text)
    if fenced:  # some servers wrap json_object answers in a code fence
        text = fenced.group(1)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MalformedAnswer(f"answer is not JSON ({exc.msg} at char {exc.pos})") from None
    validate(data)
    return data


def validate(data: Any) -> None:
    _check(data, schema(), "$")


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if not ref:
        return node
    target: Any = schema()
    for part in ref.removeprefix("#/").split("/"):
        target = target[part]
    return target


def _check(value: Any, node: dict[str, Any], where: str) -> None:
    node = _resolve(node)
    kind = node.get("type")
    if kind == "object":
        if not isinstance(value, dict):
            raise MalformedAnswer(f"{where}: expected an object")
        props = node.get("properties", {})
        for key in node.get("required", []):
            if key not in value:
                raise MalformedAnswer(f"{where}: missing {key!r}")
        if node.get("additionalProperties") is False:
            extra = sorted(set(value) - set(props))
            if extra:
                raise MalformedAnswer(f"{where}: unexpected keys {extra}")
        for key, sub in props.items():
            if key in value:
                _check(value[key], sub, f"{where}.{key}")
    elif kind == "array":
        if not isinstance(value, list):
            raise MalformedAnswer(f"{where}: expected an array")
        if "maxItems" in node and len(value) > node["maxItems"]:
            raise MalformedAnswer(f"{where}: more than {node['maxItems']} items")
        for i, item in enumerate(value):
            _check(item, node["items"], f"{where}[{i}]")
    elif kind == "string":
        if not isinstance(value, str):
            raise MalformedAnswer(f"{where}: expected a string")
        if "enum" in node and value not in node["enum"]:
            raise MalformedAnswer(f"{where}: {value!r} is not one of {node['enum']}")
        if "maxLength" in node and len(value) > node["maxLength"]:
            raise MalformedAnswer(f"{where}: longer than {node['maxLength']} characters")
    elif kind == "integer":
        if not isinstance(value, int) or isinstance(value, bool):
            raise MalformedAnswer(f"{where}: expected an integer")
        if "minimum" in node and value < node["minimum"]:
            raise MalformedAnswer(f"{where}: below {node['minimum']}")
    elif kind == "boolean" and not isinstance(value, bool):
        raise MalformedAnswer(f"{where}: expected true or false")
