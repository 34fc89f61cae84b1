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

from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.core.runcontract import RunManifest
from orchestrator.runner.store.runstore import RunStore, warn_stderr


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
