#!/usr/bin/python3
"""Validate the shared wire corpus (tests/data/wire/{valid,invalid}/<schema>.<case>.json) against
schemas/<schema>.schema.json with Debian's python3-jsonschema (Draft 2020-12). The C++ codec test
reads the same corpus, so schema and decoder are held to the same verdicts. A file that is not exactly
one JSON document (trailing bytes after the value: another value, a comma, NUL bytes) matches no
schema: a schema describes one document, and the decoder rejects those bytes too."""
import json
import pathlib
import sys

from jsonschema import Draft202012Validator, RefResolver

root = pathlib.Path(__file__).resolve().parents[2]
schemas = {p.name: json.loads(p.read_text()) for p in (root / "schemas").glob("*.schema.json")}
store = {s["$id"]: s for s in schemas.values()}
failures = []
checked = 0
for verdict in ("valid", "invalid"):
    for case in sorted((root / "tests/data/wire" / verdict).glob("*.json")):
        schema_name = case.name.split(".")[0] + ".schema.json"
        schema = schemas.get(schema_name)
        if schema is None:
            failures.append(f"{case}: no schema {schema_name}")
            continue
        Draft202012Validator.check_schema(schema)
        validator = Draft202012Validator(schema, resolver=RefResolver(schema["$id"], schema, store=store))
        try:
            # NOTE: json.loads allows only whitespace after the value, like the C++ decoder.
            errors = list(validator.iter_errors(json.loads(case.read_text())))
        except json.JSONDecodeError as e:
            errors = [f"not one JSON document: {e}"]
        checked += 1
        if verdict == "valid" and errors:
            failures.append(f"{case.name}: expected valid, got: {getattr(errors[0], 'message', errors[0])}")
        if verdict == "invalid" and not errors:
            failures.append(f"{case.name}: expected the schema to reject it")
for f in failures:
    print("FAIL", f)
print(f"{checked - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures or checked == 0 else 0)
