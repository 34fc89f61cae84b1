"""The one reader of a recorded run directory, for every command that explains a run (report, channels, gate,
triage, diff, audit, ablate's report) and for `orchestrator.load_run`.

`open_run(path)` gives a `RunDir`: the run's store (runner/store/runstore.py: its damage policy, its lean and full turn
readers, its cell files, each checked against the contract in core/runcontract.py) whose manifest is read from
disk once and then handed out again, typed (`run_manifest`) or as its JSON object (`manifest`), to every
function the command passes the `RunDir` down to. `report` used to read manifest.json 8 times on the committed
product-channel example (3 on a plain run): the channel check, the channel section and its gates, the report's
settings, the HTML page, the parallel section; now once, so a manifest edited on disk mid-command can no longer
make one command's sections disagree.

The runner, which writes runs, keeps its `RunStore`: a writer must see what it wrote.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.core.runcontract import RunManifest
from orchestrator.core.runrecords import lost_records, record_identities
from orchestrator.core.stats import BootstrapSettings
from orchestrator.runner.store.runpaths import StoreError
from orchestrator.runner.store.runstore import RunStore, warn_stderr
from orchestrator.runner.store.storedamage import Damage, standin_of
from orchestrator.runner.store.turnview import OFFSET_KEY

LOST_HINT = "`orchestrate report --allow-damaged` reports what is left, the loss listed"
MISSING_CELL_HINT = "`orchestrate report --allow-damaged` reports its turns without its config"


@dataclass(frozen=True)
class RunRead:
    """What every reader of a run reads, by one rule: its manifest, bootstrap settings, cells and turn records."""

    manifest: dict[str, Any]
    settings: BootstrapSettings
    cells: dict[str, dict[str, Any]]  # by cell id, each turn's cell among them
    turns: list[dict[str, Any]]  # every record, one per identity (core/runrecords.py RECORD_IDENTITY)


class RunDir(RunStore):
    """A run directory opened for reading by one command: its manifest read once (see the module)."""

    def __init__(self, run_dir: Path, *, recover: bool = False, warn: Callable[[str], None] = warn_stderr) -> None:
        super().__init__(run_dir, recover=recover, warn=warn)
        self._manifest: dict[str, Any] | None = None
        self._typed: RunManifest | None = None

    def manifest(self) -> dict[str, Any]:
        """The manifest's JSON object, read on the first call (a damaged one: StoreError, or the recover-mode
        stand-in) and the same object after. Callers read it; a change goes through `update_manifest`."""
        if self._manifest is None:
            self._manifest = super().manifest()
        return self._manifest

    def run_manifest(self) -> RunManifest:
        """The manifest as its typed model, built once."""
        if self._typed is None:
            self._typed = RunManifest.model_validate(self.manifest())
        return self._typed

    def update_manifest(self, **fields: Any) -> None:
        super().update_manifest(**fields)
        self._manifest, self._typed = None, None  # read again: the file is what was written


def open_run(run_dir: Path, *, recover: bool = False, warn: Callable[[str], None] = warn_stderr) -> RunDir:
    """A recorded run to read (`recover`: read what is intact of a damaged one, as runner/store/runstore.py says)."""
    return RunDir(run_dir, recover=recover, warn=warn)


def read_run(store: RunStore, *, view: bool = False) -> RunRead:
    """The run as every command reads it (report, stats' run form, triage, diff, load_run): a damaged manifest,
    bootstrap setting, cell file or turn line, a turn record copied, or a cell file missing while turns name
    the cell is an error naming the file, or in recover mode damage listed and read around. `view`: lean
    turn records (runner/store/turnview.py)."""
    manifest = store.manifest()
    settings = bootstrap_settings(store, manifest)
    cells = {cell["cell_id"]: cell for cell in store.read_cells()}
    turns = store.read_turns(view=view)
    named = Counter(map(operator.itemgetter("cell_id"), turns))
    missing = sorted(set(named) - set(cells))
    for cell_id in missing:
        path = store.cells_dir / f"{cell_id}.json"
        problem = f"missing ({named[cell_id]} turn record(s) in turns.jsonl name this cell)"
        refuse_or_note(store, Damage(path, None, "missing_cell", problem), MISSING_CELL_HINT,
                       "its turns are reported without its config")  # fmt: skip
    cells |= standins(store, set(missing), turns)
    note_lost_records(store, cells, turns)
    note_sample_mismatch(store, cells, turns)
    return RunRead(manifest, settings, cells, turns)


def note_sample_mismatch(store: RunStore, cells: dict[str, dict[str, Any]], turns: list[dict[str, Any]]) -> None:
    """A record whose `sample` is not its cell's (the cell id carries the sample): a hand edit, counted in another
    sample's pairing (diff's seed identity, the channels' first-answer pairs). An error naming turns.jsonl, or
    damage listed in recover mode."""
    cell_ids, samples = map(operator.itemgetter("cell_id"), turns), map(operator.methodcaller("get", "sample"), turns)
    pairs = set(zip(cell_ids, samples, strict=True))
    wrong = {cell_id for cell_id, sample in pairs if sample is not None and sample != _sample(cells[cell_id])}
    if not wrong:  # decided over distinct (cell, sample) pairs, built in C
        return
    odd = [
        t
        for t in turns
        if t["cell_id"] in wrong and t.get("sample", _sample(cells[t["cell_id"]])) != _sample(cells[t["cell_id"]])
    ]
    for cell_id in sorted(wrong):
        problem = f"cell {cell_id}: a record's sample is not the cell's ({_sample(cells[cell_id])})"
        refuse_or_note(store, Damage(store.turns_path, None, "bad_line", problem), "", "read as the cell's")
    for turn in odd:
        turn["sample"] = _sample(cells[turn["cell_id"]])


def _sample(cell: dict[str, Any]) -> Any:
    """A cell's sample axis (absent: 0, the first)."""
    return cell.get("sample") or 0


def standins(store: RunStore, missing: set[str], turns: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """A stand-in cell for each missing cell file, from its first turn record (a lean view's whole record read at
    its offset: one seek a cell, never a scan of turns.jsonl per cell)."""
    firsts: dict[str, dict[str, Any]] = {}
    for turn in turns if missing else []:
        if turn["cell_id"] in missing:
            firsts.setdefault(turn["cell_id"], turn)
    offsets = [first[OFFSET_KEY] for first in firsts.values() if OFFSET_KEY in first]
    whole = store.read_records_at(offsets)
    return {
        cell_id: standin_of(whole.get(first.get(OFFSET_KEY, -1), first), "cell file missing")
        for cell_id, first in firsts.items()
    }


def note_lost_records(store: RunStore, cells: dict[str, dict[str, Any]], turns: list[dict[str, Any]]) -> None:
    """A gap in a seed run, or a seed a complete cell planned and did not end (core/runrecords.py): a line of
    turns.jsonl was lost. An error naming the file, or in recover mode damage listed (the rest is reported)."""
    lost = lost_records(
        cells, record_identities(turns), list(map(bool, map(operator.methodcaller("get", "end"), turns)))
    )
    for cell_id in sorted(lost):
        problem = f"cell {cell_id}: {lost[cell_id]} (a record lost)"
        damage = Damage(store.turns_path, None, "lost_record", problem)
        refuse_or_note(store, damage, LOST_HINT, "the cell's figures cover what is left")


def bootstrap_settings(store: RunStore, manifest: dict[str, Any]) -> BootstrapSettings:
    """The recorded matrix's bootstrap settings (a bad one: an error naming the manifest, or the defaults in
    recover mode, listed as damage)."""
    try:
        return BootstrapSettings.model_validate(manifest.get("matrix", {}).get("bootstrap", {}))
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in ("matrix", "bootstrap", *error["loc"]))
        problem = f"field {where!r}: {error['msg']}"
        if not store.recover:
            raise StoreError(f"{store.manifest_path}: not a run manifest ({problem})") from exc
        store.note(Damage(store.manifest_path, None, "bad_setting", f"{problem}; the default settings are used"))
        return BootstrapSettings()


def refuse_or_note(store: RunStore, damage: Damage, hint: str, consequence: str) -> None:
    """The store's damage policy for what the whole-run rules find: an error naming the file (with `hint`), or in
    recover mode the damage noted with its `consequence` (what the report does about it)."""
    if not store.recover:
        raise StoreError(f"{damage}; {hint}" if hint else str(damage))
    store.note(Damage(damage.path, damage.line, damage.kind, f"{damage.detail}; {consequence}"))
