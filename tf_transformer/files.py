"""File writing that never leaves a half-written file under the final name."""

from __future__ import annotations

import os
import pathlib
from typing import Union


def write_atomically(path, data: Union[str, bytes]) -> pathlib.Path:
    """Writes `data` (text as UTF-8) to a temporary file beside `path`, then renames it over `path`.

    The rename is atomic on POSIX file systems: readers see the old file or the whole new one.
    """
    path = pathlib.Path(path)
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        with open(temporary, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:  # a full disk, or a signal's exception: no temporary file left beside `path`
        temporary.unlink(missing_ok=True)
        raise
    return path
