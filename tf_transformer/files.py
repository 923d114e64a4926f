"""File writing that never leaves a half-written file under the final name."""

from __future__ import annotations

import os
import pathlib


def write_text_atomically(path, text: str) -> pathlib.Path:
    """Writes `text` to a temporary file beside `path`, then renames it over `path` (atomic on POSIX)."""
    path = pathlib.Path(path)
    temporary = path.with_name(f".{path.name}.tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    return path
