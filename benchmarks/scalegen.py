"""A synthetic run directory of any size, shaped like the committed example runs (for benchmarks/bench_scale.py).

Cells are copies of the example runs' cell files (every stack config, mode and request axis they hold, streamed
twins included), one copy per synthetic model; each cell gets `seeds` seeds of `turns_per_seed` turns. Every turn
record is a real record of the template cell (its raw body, content, calls, flags, outcome and detail: real
sizes), with the identifying fields rewritten (run, cell, model, seed, turn) and the seed's last turn carrying
a real `end` (turn_cap where the template had none).
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parent.parent / "results" / "examples"
MANIFEST_TEMPLATE = "20261203T131653Z-cpu-87d008"  # no channels: the report's plain path
OVERRIDDEN = ("schema_version", "run_id", "cell_id", "seed", "turn", "attempt", "model", "seed_attempt", "superseded",
              "end")  # fmt: skip


def _templates() -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """(cell file, its turn records) for every example cell that has turns."""
    found = []
    for run in sorted(p for p in EXAMPLES.iterdir() if (p / "turns.jsonl").is_file()):
        turns: dict[str, list[dict[str, Any]]] = {}
        for line in (run / "turns.jsonl").read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            turns.setdefault(record["cell_id"], []).append(record)
        for path in sorted((run / "cells").glob("*.json")):
            cell = json.loads(path.read_text(encoding="utf-8"))
            if turns.get(cell["cell_id"]):
                found.append((cell, turns[cell["cell_id"]]))
    return found


def _bodies(records: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    """Each record as the JSON text of its other fields (without the outer braces), and its end."""
    return [
        (json.dumps({k: v for k, v in r.items() if k not in OVERRIDDEN}, separators=(",", ":"))[1:-1], r.get("end"))
        for r in records
    ]


def generate(run_dir: Path, turns: int, seeds: int = 25, turns_per_seed: int = 20, rng_seed: int = 7) -> int:
    """Write a run of about `turns` turn records (whole seeds) into `run_dir`; returns how many were written."""
    rng = random.Random(rng_seed)
    templates = _templates()
    n_cells = max(1, math.ceil(turns / (seeds * turns_per_seed)))
    run_id = run_dir.name
    (run_dir / "cells").mkdir(parents=True)
    manifest = json.loads((EXAMPLES / MANIFEST_TEMPLATE / "manifest.json").read_text(encoding="utf-8"))
    (run_dir / "manifest.json").write_text(json.dumps({**manifest, "run_id": run_id}, indent=2))
    written = 0
    with (run_dir / "turns.jsonl").open("w", encoding="utf-8") as out:
        for index in range(n_cells):
            template = index % len(templates)
            cell, records = templates[template]
            # Unique per copy and template: two example runs hold cells of the same id (and model and column).
            tag = f"t{template}-synth{index // len(templates)}"
            model = f"{cell.get('model')}-{tag}"
            cell_id = f"{cell['cell_id']}__{tag}"
            # The seeds it planned are the ones written (a complete cell ended each: core/runrecords.py).
            planned = [f"s-{seed:03d}" for seed in range(seeds)]
            copy = {**cell, "cell_id": cell_id, "model": model, "order": index, "seeds": planned}
            (run_dir / "cells" / f"{cell_id}.json").write_text(json.dumps(copy, indent=2))
            bodies = _bodies(records)
            ends = [end for _body, end in bodies if end] or ["turn_cap"]
            head = f'"schema_version":2,"run_id":{json.dumps(run_id)},"cell_id":{json.dumps(cell_id)}'
            head += f',"model":{json.dumps(model)}'
            lines = []
            for seed in range(seeds):
                for turn in range(turns_per_seed):
                    body, _end = bodies[rng.randrange(len(bodies))]
                    end = json.dumps(rng.choice(ends)) if turn == turns_per_seed - 1 else "null"
                    lines.append(
                        f'{{{head},"seed":"s-{seed:03d}","turn":{turn},"attempt":0,{body},"seed_attempt":0,'
                        f'"superseded":false,"end":{end}}}\n'
                    )
            out.write("".join(lines))
            written += len(lines)
    return written


if __name__ == "__main__":
    import sys

    print(generate(Path(sys.argv[1]), int(sys.argv[2])))
