"""Saved ``waldio bench`` results: their schemas, and reading one back.

A run writes one of four kinds of result document, each with its own schema
(``python/waldio/schemas``) and its own report module:

``bench``       the SQL workload (:mod:`.runner`; printed by :mod:`.report`)
``speedtest1``  ``--workload speedtest1`` (:mod:`.speedtest1`; :mod:`.speedtest1_report`)
``processes``   ``--processes`` (:mod:`.processes`; :mod:`.processes_report`)
``webapp``      ``--workload webapp --processes`` (:mod:`.webapp`; :mod:`.webapp_report`)

The kind is the document's ``kind`` field (absent: ``bench``, the first kind).
:func:`validate` checks a document against its kind's schema, :func:`load` reads a
file and refuses, with the reason, anything that is not a valid result.  Nothing
here prints.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional

_SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"
SCHEMA_FILES = {"bench": "bench.schema.json", "speedtest1": "speedtest1.schema.json",
                "processes": "bench-processes.schema.json",
                "webapp": "bench-webapp.schema.json"}


def kind_of(doc: Dict[str, Any]) -> str:
    return str(doc.get("kind", "bench"))


def schema(kind: str = "bench") -> Dict[str, Any]:
    with open(_SCHEMAS / SCHEMA_FILES[kind], encoding="utf-8") as f:
        return json.load(f)


def validate(doc: Dict[str, Any]) -> List[str]:
    """Schema violations of ``doc`` (empty when valid, or when jsonschema is missing)."""
    try:
        import jsonschema
    except ImportError:
        return []
    kind = kind_of(doc)
    if kind not in SCHEMA_FILES:
        return [f"kind: {kind!r} is not a waldio bench result (accepted: "
                f"{', '.join(SCHEMA_FILES)})"]
    validator = jsonschema.Draft202012Validator(schema(kind))
    return [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
            for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))][:20]


def load(path: str, kind: Optional[str] = None) -> Dict[str, Any]:
    """The result in ``path`` (of ``kind`` when given); ValueError says why it is not one."""
    with open(path, encoding="utf-8") as f:
        try:
            doc = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"not JSON: {e}") from None
    if not isinstance(doc, dict) or "schema_version" not in doc:
        raise ValueError("not a waldio bench result (no schema_version)")
    got = kind_of(doc)
    if got not in SCHEMA_FILES:
        raise ValueError(f"kind {got!r} is not a waldio bench result "
                         f"(accepted: {', '.join(SCHEMA_FILES)})")
    if kind is not None and got != kind:
        raise ValueError(f"a {got} result, not a {kind} result")
    want = schema(got)["properties"]["schema_version"]["const"]
    if doc["schema_version"] != want:
        raise ValueError(f"schema_version {doc['schema_version']} (this waldio reads {want} "
                         f"for {got} results)")
    problems = validate(doc)
    if problems:
        raise ValueError(f"does not match the {got} schema: " + "; ".join(problems[:5]))
    return doc
