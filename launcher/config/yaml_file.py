"""`--ft-cfg-path`: read a YAML file of `relaunch run` options, with NVRx's spellings.

Keys are option names with `_` or `-`; the `--ft-*` options also without `ft_` (as NVRx
writes them); NVRx names through `config/aliases.yaml`. The file's top level and its
`fault_tolerance:` section are read; a `fault_tolerance:` section nested deeper (NVRx's
rule, e.g. inside a Megatron config) is read alone. Bad values raise `ConfigError`;
unknown keys and NVRx keys relaunch ignores become one warning line each.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from importlib import resources
from typing import Any

import yaml

from relaunch.launcher.config.option import Option
from relaunch.launcher.config.values import ConfigError
from relaunch.restart_agent import safe_files

NULLABLE = ("ft_heartbeat_timeout", "ft_initial_heartbeat_timeout")  # `null`: no timeout


def _alias_table() -> dict[str, Any]:
    text = resources.files("relaunch.launcher.config").joinpath("aliases.yaml").read_text("utf-8")
    return yaml.safe_load(text) or {}


def _aliases() -> dict[str, str]:
    return {str(k): str(v) for k, v in (_alias_table().get("aliases") or {}).items()}


def _ignored() -> dict[str, str]:
    """NVRx keys relaunch accepts and ignores -> why."""
    return {str(k): str(v) for k, v in (_alias_table().get("ignored") or {}).items()}


def ignored_flags() -> dict[str, tuple[str, str]]:
    """NVRx flags accepted and ignored on the command line: flag -> (takes, instead)."""
    table = _alias_table().get("ignored_flags") or {}
    return {str(k): (str(v[0]), str(v[1])) for k, v in table.items()}


def _find_section(data: dict[str, Any]) -> dict[str, Any] | None:
    """NVRx's rule: a `fault_tolerance:` section anywhere in the file (depth first)."""
    for key, value in data.items():
        if isinstance(value, dict):
            if key == "fault_tolerance":
                return value
            found = _find_section(value)
            if found is not None:
                return found
    return None


def _yaml_text(value: Any, opt: Option) -> str:
    """YAML 1.1 reads `off`/`on` as booleans; give them back their words."""
    if isinstance(value, dict):
        return ",".join(f"{k}:{v}" for k, v in value.items())
    if isinstance(value, list):  # local_ranks_filter: [0, 1]
        return ",".join(str(v) for v in value)
    if isinstance(value, bool):
        if opt.is_flag:
            return str(value).lower()
        return "on" if value else "off"
    return str(value)


def _hint(name: str, options: Mapping[str, Option]) -> str:
    keys = [*options, *(k[3:] for k in options if k.startswith("ft_")), *_aliases()]
    close = difflib.get_close_matches(name, keys, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


MAX_YAML_BYTES = 4 << 20
MAX_YAML_DEPTH = 64  # nesting levels of flow collections ([ {) or indentation


def _check_depth(text: str, path: str) -> None:
    """Refuse, before parsing, a document nested deeper than MAX_YAML_DEPTH (PyYAML's
    composer recurses per level: a deep document would be a RecursionError traceback)."""
    depth = deepest = 0
    for ch in text:  # flow nesting; quotes are rare in configs and only overcount
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(0, depth - 1)
    indents = {len(line) - len(line.lstrip(" -")) for line in text.splitlines() if line.strip()}
    if deepest > MAX_YAML_DEPTH or len(indents) > MAX_YAML_DEPTH:
        raise ConfigError(f"config file {path} is nested deeper than {MAX_YAML_DEPTH} levels")


def load_yaml(
    path: str, options: Mapping[str, Option], warnings: list[str] | None = None
) -> dict[str, Any]:
    """Read `--ft-cfg-path` against `options` ({dest: Option}); returns {dest: converted
    value}. Raises ConfigError on a bad file or value; unknown and ignored keys are
    appended to `warnings`, one line each."""
    try:  # bounded, regular files only (a FIFO or /dev/zero is refused, not read)
        text = safe_files.read_bounded(path, MAX_YAML_BYTES).decode("utf-8")
        _check_depth(text, path)
        data = yaml.safe_load(text)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except safe_files.TooLarge:
        raise ConfigError(f"config file {path} is larger than {MAX_YAML_BYTES} bytes") from None
    except safe_files.NotRegularFile:
        raise ConfigError(f"config file {path} is not a regular file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    except RecursionError:
        raise ConfigError(f"config file {path} is nested too deeply") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a mapping of option names to values")
    if isinstance(data.get("fault_tolerance"), dict):
        nested = data.pop("fault_tolerance")
        data = {**data, **nested}
    else:
        section = _find_section(data)
        if section is not None:  # nested in a bigger config (e.g. a Megatron YAML)
            data = dict(section)
    aliases, ignored = _aliases(), _ignored()
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = str(key).lstrip("-").replace("-", "_")
        name = aliases.get(name, name)
        if name not in options and f"ft_{name}" in options:
            name = f"ft_{name}"  # NVRx writes the `--ft-*` options without `ft_`
        if name in ignored:
            if warnings is not None:
                warnings.append(f"config file {path}: {key!r} ignored: {ignored[name]}")
            continue
        if name not in options:
            if warnings is not None:
                warnings.append(
                    f"config file {path}: unknown option {key!r} ignored{_hint(name, options)}"
                )
            continue
        opt = options[name]
        if value is None and name in NULLABLE:
            out[name] = None
            continue
        try:
            converted = opt.type(_yaml_text(value, opt))
        except ValueError as exc:
            raise ConfigError(f"config file {path}: {key}: {value!r}: {exc}") from None
        if opt.choices and converted not in opt.choices:
            raise ConfigError(f"config file {path}: {key}: {value!r} is not one of {opt.choices}")
        out[name] = converted
    return out
