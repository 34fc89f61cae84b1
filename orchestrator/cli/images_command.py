"""`orchestrate images`: the image each Docker-launched stack config of a matrix runs, as the engine resolves
it now (`--refresh` pulls each tag first: the nightly's image refresh), beside what the previous night ran and
the release-notes link, saved to a file (`--out`) and/or written into a run's manifest (`--into`, as
manifest["images"]). The nightly resolves before the matrix (so the run uses the fresh pull) and records after
it (`--record FILE --into RUN`): the matrix runner is not involved. Thin: the engine calls live in
serving/images.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from orchestrator.cli import app, console, err_console, fail
from orchestrator.core.runcontract import ContractError, check_images
from orchestrator.runner.config.matrixfile import MatrixError, load_matrix
from orchestrator.runner.store.rundir import open_run
from orchestrator.runner.store.runstore import RunStore, StoreError, now
from orchestrator.runner.store.storedamage import load_json
from orchestrator.serving.images import ImageRecord, engine_client, image_record

MANIFEST_KEY = "images"


def _previous_images(previous: Path | None) -> list[dict[str, Any]]:
    """The image records a previous run's manifest holds (none when it has no such record)."""
    if previous is None:
        return []
    try:
        recorded = open_run(previous).manifest().get(MANIFEST_KEY) or {}
    except StoreError as exc:
        fail(f"--previous: {exc}")
    return list(recorded.get("entries") or []) if isinstance(recorded, dict) else []


def resolve_matrix(matrix_path: Path, *, refresh: bool, previous: list[dict[str, Any]]) -> dict[str, Any]:
    """One record per (stack, host, image) the matrix's Docker-launched stack configs use."""
    try:
        matrix, _ = load_matrix(matrix_path)
    except MatrixError as exc:
        fail(str(exc))
    client, engine_error = engine_client()
    if engine_error:
        err_console.print(f"images: no Docker engine: {engine_error}", highlight=False, soft_wrap=True)
    records: dict[tuple[str, str, str | None], ImageRecord] = {}
    for entry in matrix.stacks:
        if entry.launcher != "docker" or (entry.stack, entry.host, entry.image) in records:
            continue
        spec = entry.spec  # resolved once, when the matrix validated
        key = (entry.stack, entry.host, entry.image)
        records[key] = image_record(client, spec, entry.host, entry.image, refresh=refresh, previous=previous)
    entries = [
        {**record.model_dump(mode="json"), "changed": record.changed, "identity": record.identity}
        for record in records.values()
    ]
    return {"resolved_at": now(), "matrix_file": str(matrix_path), "refresh": refresh, "entries": entries}


def release_unknown(entry: dict[str, Any]) -> str:
    """What to say when no release could be told (a floating tag whose image labels no release of the stack)."""
    label = entry.get("version_label")
    seen = f"; its version label {label!r} is not one of this stack's releases" if label else ""
    return f" release unknown (tag {entry.get('tag')!r} names none{seen})"


def describe(entry: dict[str, Any]) -> str:
    """One line per image, saying plainly what could not be resolved and what changed since last night."""
    head = f"{entry['stack']} ({entry['host']}) {entry['image']}: "
    notes = f" release notes: {entry['release_notes']}" if entry.get("release_notes") else release_unknown(entry)
    if entry["status"] == "unresolved":
        return head + f"NOT RESOLVED ({entry.get('reason')}); no digest recorded"
    ident = entry.get("identity")
    if entry.get("changed"):
        return head + f"CHANGED {entry.get('old_digest')} -> {ident} ({entry.get('old_source')}).{notes}"
    said = "unchanged" if entry.get("changed") is False else "no previous digest to compare"
    local = " (local build, image id)" if entry["status"] == "local_build" else ""
    return head + f"{ident}{local}, {said}.{notes}"


def _read_record(path: Path) -> dict[str, Any]:
    """A record saved by `--out`, checked against the run contract (core/runcontract.py `ImagesRecord`)."""
    try:
        data = load_json(path.read_bytes())  # deep nesting: a ValueError, not a RecursionError
    except (OSError, ValueError) as exc:
        fail(f"--record {path}: cannot read it ({exc})")
    try:
        return check_images(f"--record {path}", data)
    except ContractError as exc:
        fail(f"{exc} (written by `orchestrate images --out`?)")


def _save(out: Path, data: dict[str, Any]) -> None:
    try:
        out.write_text(json.dumps(data, indent=2) + "\n")
    except OSError as exc:
        fail(f"--out {out}: cannot write it ({exc})")


@app.command("images")
def images_command(
    matrix: Annotated[Path | None, typer.Option(help="Resolve the images this matrix's Docker stacks use.")] = None,
    refresh: Annotated[bool, typer.Option("--refresh", help="Pull each tag first (local builds are not).")] = False,
    previous: Annotated[
        Path | None, typer.Option(help="The previous night's run: its recorded images are the old digests.")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Save the record (JSON) to this file.")] = None,
    record: Annotated[Path | None, typer.Option(help="Use a record saved by --out instead of resolving.")] = None,
    into: Annotated[Path | None, typer.Option(help="Write the record into this run's manifest ('images').")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the record as JSON.")] = False,
) -> None:
    """Resolve (optionally pull) the stack images a matrix runs, with the previous night's digest and the
    release-notes link; save it, or record it in a run's manifest. An image the engine cannot resolve is
    recorded as unresolved with the reason: never a guessed digest."""
    if (matrix is None) == (record is None):
        fail("give --matrix FILE (resolve now) or --record FILE (a saved record), one of them")
    data = resolve_matrix(matrix, refresh=refresh, previous=_previous_images(previous)) if matrix else None
    data = data or _read_record(record)  # type: ignore[arg-type]
    if out is not None:
        _save(out, data)
    if into is not None:
        try:
            store = RunStore(into)
            store.manifest()
            store.update_manifest(**{MANIFEST_KEY: data})
        except (StoreError, OSError) as exc:
            fail(f"--into {into}: {exc}")
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return
    for entry in data["entries"]:
        console.print(describe(entry), highlight=False, soft_wrap=True)
    if not data["entries"]:
        console.print("no stack config of this matrix runs in Docker: no image to resolve", highlight=False)
