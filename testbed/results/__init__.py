"""Results: the files a run writes (CSV with units in the header, appended so that no
experiment overwrites another's rows), statistics over them, the plots drawn from them, and
finished runs read back as pandas tables (`load`, `load_many`: results/analysis.py).

`load` and `load_many` import pandas when first called: `testbed validate` imports this
package (the experiments' plots live here) and must not load it."""
from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pandas import DataFrame  # type: ignore[import-untyped]

    from .analysis import Run

__all__ = ["load", "load_many"]


def load(run_dir: str | os.PathLike[str]) -> Run:
    """A results directory's tables as DataFrames, with its manifest, summary and
    headlines (analysis.load)."""
    from .analysis import load as load_run
    return load_run(run_dir)


def load_many(dirs: Iterable[str | os.PathLike[str]]) -> dict[str, DataFrame]:
    """Every table of several runs concatenated under a first column `run`
    (analysis.load_many)."""
    from .analysis import load_many as load_runs
    return load_runs(dirs)
