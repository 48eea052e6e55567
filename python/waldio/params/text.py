"""A parameter record as text for people: flattened ``key: value`` lines per section.
"""
from __future__ import annotations

from typing import Any, List, Tuple

from .common import UNKNOWN, WHY, Params, is_known


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def flatten(section: Any, prefix: str = "") -> List[Tuple[str, str]]:
    """(dotted key, printed value) pairs; unknowns carry their reason."""
    out: List[Tuple[str, str]] = []
    if isinstance(section, dict):
        why = section.get(WHY, {}) if isinstance(section.get(WHY), dict) else {}
        for key, value in section.items():
            if key == WHY:
                continue
            name = f"{prefix}{key}"
            if isinstance(value, dict):
                out.extend(flatten(value, name + "."))
            elif isinstance(value, list) and any(isinstance(v, dict) for v in value):
                for i, v in enumerate(value):
                    out.extend(flatten(v, f"{name}.{i}."))
            elif isinstance(value, list):
                out.append((name, ", ".join(format_value(v) for v in value) or "(empty)"))
            elif not is_known(value):
                reason = why.get(key)
                out.append((name, f"{UNKNOWN} ({reason})" if reason else UNKNOWN))
            else:
                out.append((name, format_value(value)))
    else:
        out.append((prefix.rstrip(".") or "value", format_value(section)))
    return out


def _wrap(text: str, indent: int, width: int) -> str:
    if indent + len(text) <= width or ", " not in text:
        return text
    lines, line = [], ""
    for part in text.split(", "):
        piece = part if not line else line + ", " + part
        if line and indent + len(piece) + 1 > width:
            lines.append(line + ",")
            line = part
        else:
            line = piece
    lines.append(line)
    return ("\n" + " " * indent).join(lines)


_ORDER = ("workload", "sqlite", "filesystem", "device", "system")


def format_params(params: Params, width: int = 100) -> str:
    """Aligned "key: value" lines grouped by section, for a table header."""
    lines: List[str] = []
    scalars = [(k, v) for k, v in params.items() if not isinstance(v, dict)]
    for k, v in scalars:
        lines.append(f"{k}: {format_value(v)}")
    names = [k for k in _ORDER if isinstance(params.get(k), dict)]
    names += [k for k, v in params.items() if isinstance(v, dict) and k not in _ORDER]
    for name in names:
        pairs = flatten(params[name])
        lines.append(f"[{name}]")
        if not pairs:
            lines.append("  (none)")
            continue
        keyw = max(len(k) for k, _ in pairs) + 1
        for key, text in pairs:
            lines.append(f"  {key + ':':<{keyw}} {_wrap(text, keyw + 3, width)}")
    return "\n".join(lines)
