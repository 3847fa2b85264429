#!/usr/bin/env python3
"""Validates constrained outputs against their JSON schemas with a validator nobody here wrote:
Python's jsonschema (Draft 2020-12, or the draft a schema's "$schema" names, with its format
checker), installed by scripts/setup.sh
(Debian's python3-jsonschema). tests/unit/test_structured_schema_corpus.cpp writes the input.

    python3 validate_json_outputs.py outputs.json   -> prints a JSON report; exit 0 when all valid

Input: {"cases": [{"name", "schema", "outputs": [text, ...]}]}. Report: {"checked": n, "failures":
[{"name", "output", "error"}], "schema_errors": [...], "unchecked_formats": [...]}: a format the
installed jsonschema cannot check (date-time and time need the rfc3339-validator package) is
listed there instead of being passed silently. Exit 2 when jsonschema is missing.
"""
import json
import sys

# jsonschema checks some formats only when an optional module is there ("uri": rfc3987, which
# scripts/setup.sh installs as Debian's python3-rfc3987). A python3 outside Debian's (a virtual
# environment, pyenv) finds Debian's modules last, so its own packages still come first.
sys.path.append("/usr/lib/python3/dist-packages")

try:
    import jsonschema
    from jsonschema import Draft202012Validator
except ImportError:
    print(json.dumps({"error": "python3 has no jsonschema module (scripts/setup.sh installs python3-jsonschema)"}))
    sys.exit(2)


def formats_in(schema, found):
    if isinstance(schema, dict):
        if isinstance(schema.get("format"), str):
            found.add(schema["format"])
        for value in schema.values():
            formats_in(value, found)
    elif isinstance(schema, list):
        for value in schema:
            formats_in(value, found)
    return found


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    report = {"checked": 0, "failures": [], "schema_errors": [], "unchecked_formats": set()}
    for case in cases:
        schema = case["schema"]
        # The draft its "$schema" names (draft 4's tuple form, "items" as an array), else 2020-12.
        draft = jsonschema.validators.validator_for(schema, default=Draft202012Validator)
        checker = draft.FORMAT_CHECKER
        try:
            draft.check_schema(schema)
        except jsonschema.SchemaError as e:
            report["schema_errors"].append({"name": case["name"], "error": e.message})
            continue
        report["unchecked_formats"] |= formats_in(schema, set()) - set(checker.checkers)
        validator = draft(schema, format_checker=checker)
        for output in case["outputs"]:
            report["checked"] += 1
            try:
                value = json.loads(output)
            except ValueError as e:
                report["failures"].append({"name": case["name"], "output": output, "error": "not JSON: " + str(e)})
                continue
            errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
            if errors:
                where = "/".join(str(p) for p in errors[0].absolute_path)
                report["failures"].append({"name": case["name"], "output": output,
                                           "error": f"at '{where}': {errors[0].message}"})
    report["unchecked_formats"] = sorted(report["unchecked_formats"])
    print(json.dumps(report, ensure_ascii=False))
    sys.exit(0 if not report["failures"] and not report["schema_errors"] else 1)


if __name__ == "__main__":
    main()
