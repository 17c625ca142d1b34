"""A run's output directory holds the files of one run only.

`Result.write` (and so `reducelab run --out DIR`) calls `prepare_run_dir` first:

- a missing directory is created, an empty one is used as it is;
- a directory that holds ``summary.json`` was written by an earlier run: its top-level files of
  the kinds reducelab writes there (``.json``, ``.csv``, and the ``.png``/``.svg``/``.pdf`` of
  `reducelab plot links`) are deleted, so that no file of the earlier run (e.g. a CSV the new
  run does not produce, or a plot of the old data) stays next to the new results; other
  entries (subdirectories, notes) are kept;
- any other non-empty directory is refused: it is not a results directory, and mixing a run
  into it could not be undone.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

SUMMARY_FILE = "summary.json"
RUN_FILE_SUFFIXES = (".json", ".csv", ".png", ".svg", ".pdf")
"""Kinds of files a run directory holds from reducelab (results, summary, link plots)."""


def prepare_run_dir(outdir: str | os.PathLike[str]) -> Path:
    """Make `outdir` ready for one run's files (see the module docstring); returns it.

    Raises FileExistsError (an OSError) for a path that is not a directory, or a non-empty
    directory without ``summary.json``; OSError if a stale file cannot be deleted.
    """
    out = Path(outdir)
    if out.exists() and not out.is_dir():
        raise FileExistsError(errno.EEXIST, "exists and is not a directory", str(out))
    if not out.exists():
        out.mkdir(parents=True)
        return out
    entries = list(out.iterdir())
    if not entries:
        return out
    if not (out / SUMMARY_FILE).is_file():
        raise FileExistsError(
            errno.EEXIST,
            "is not empty and holds no summary.json, so it is not a reducelab results directory; "
            "choose another output directory or empty it",
            str(out),
        )
    for entry in entries:
        if entry.is_file() and not entry.is_symlink() and entry.suffix.lower() in RUN_FILE_SUFFIXES:
            entry.unlink()
    return out
