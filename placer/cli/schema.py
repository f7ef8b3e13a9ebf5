"""``placer schema``: print or write the JSON Schemas of the input and placement formats."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer


def schema_command(
    write: Annotated[
        Path | None, typer.Option("--write", help="Directory to write the *.schema.json files to.")
    ] = None,
) -> None:
    """JSON Schemas generated from placer's own models (the committed ones live in schemas/)."""
    from placer.model.schemas import all_schemas

    schemas = all_schemas()
    if write is None:
        sys.stdout.write(json.dumps(schemas, indent=2, sort_keys=True) + "\n")
        return
    from placer.emit.files import write_output
    from placer.model.errors import InputError

    try:
        write.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"--write {write}: cannot make the directory ({exc.strerror or exc})") from None
    for name, schema in schemas.items():
        write_output(write / f"{name}.schema.json", json.dumps(schema, indent=2, sort_keys=True) + "\n", "--write")
        print(f"wrote {write / f'{name}.schema.json'}", file=sys.stderr)
