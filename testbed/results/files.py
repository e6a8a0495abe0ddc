"""Result files: CSV tables with units in their headers.

Two experiments of one run may write the same table (two incast-like experiments both
write `class_queues.csv`, two training experiments `training.csv`): rows are appended, and
when the second writer brings columns the first did not have, the table is rewritten under
the union of both headers (missing cells empty). Nothing a run measured is overwritten.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path


def read_rows(path: Path) -> list[dict]:
    """A CSV table as dicts (header -> cell)."""
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def read_jsonl(path: Path) -> list[dict]:
    """A JSON-lines log as dicts; a line cut short by a crash (or still being written) is
    left out, and a log that does not exist is empty."""
    out = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def append_csv(path: Path, header: list[str], rows: list[list]) -> Path:
    """Write `rows` under `header` into `path`, keeping every row already there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        with path.open("w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(header)
            writer.writerows(rows)
        return path
    with path.open(newline="") as fh:
        old_header = next(csv.reader(fh), [])
    if old_header == header:
        with path.open("a", newline="") as fh:
            csv.writer(fh).writerows(rows)
        return path
    old = read_rows(path)
    union = list(dict.fromkeys([*old_header, *header]))
    new = [dict(zip(header, row)) for row in rows]
    with path.open("w", newline="") as fh:
        table = csv.DictWriter(fh, fieldnames=union, restval="")
        table.writeheader()
        table.writerows(old + new)
    return path
