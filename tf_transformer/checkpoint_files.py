"""A checkpoint's files, seen without TensorFlow: what a `tf.train.CheckpointManager` folder's `checkpoint` index
lists, whether a checkpoint's index and data files are all there, and the fix an unreadable one's error gives.

No TensorFlow, so that the commands can refuse a damaged latest checkpoint at once, before TensorFlow starts
(`check_latest_checkpoint`); `tf_transformer.checkpoints` reads the files and uses the same checks and fix.
"""

from __future__ import annotations

import glob
import os
import pathlib
import re
from typing import List, Optional, Union

from tf_transformer.errors import CheckpointError
from tf_transformer.model_dir import CHECKPOINT_DIR

# The lines of a `checkpoint` index (CheckpointState in protobuf text format) that name a checkpoint, with a path
# that needs no unescaping; an index with any other path line is left to TensorFlow's reader.
_PATH_LINE = re.compile(r'(model_checkpoint_path|all_model_checkpoint_paths): "([^"\\]*)"')
_OTHER_LINE = re.compile(r"(all_model_checkpoint_timestamps|last_preserved_timestamp): \S+")


def checkpoint_files_problem(path: str) -> Optional[str]:
    """What is wrong with the files of checkpoint `path` (a prefix), seen without reading them; None if nothing.

    Catches a missing or empty index and missing data shards; a truncated or corrupted file only shows when
    read (`tf_transformer.checkpoints.read_checkpoint`).
    """
    index = path + ".index"
    if not os.path.isfile(index):
        return f"its index file {index} is missing"
    if os.path.getsize(index) == 0:
        return f"its index file {index} is empty"
    shards = glob.glob(glob.escape(path) + ".data-*-of-*")
    match = re.search(r"\.data-\d+-of-(\d+)$", shards[0]) if shards else None
    expected = int(match.group(1)) if match else 1
    missing = [
        f"{path}.data-{shard:05d}-of-{expected:05d}"
        for shard in range(expected)
        if not os.path.isfile(f"{path}.data-{shard:05d}-of-{expected:05d}")
    ]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        return f"its data file {missing[0]} is missing{more}"
    return None


def listed_checkpoints(folder: Union[str, os.PathLike]) -> Optional[List[str]]:
    """The checkpoints the `checkpoint` index of `folder` lists, oldest first, the latest last, as TensorFlow's
    `tf.train.get_checkpoint_state` gives them (a relative path joined to `folder`); None without an index, or
    with one this reader does not take apart (an escaped character in a path): TensorFlow's reader decides then."""
    folder = os.fspath(folder)
    try:
        with open(os.path.join(folder, "checkpoint"), encoding="utf-8") as handle:
            lines = [line.strip() for line in handle if line.strip()]
    except (OSError, UnicodeDecodeError):
        return None
    latest, paths = None, []
    for line in lines:
        match = _PATH_LINE.fullmatch(line)
        if match is None:
            if _OTHER_LINE.fullmatch(line):
                continue
            return None
        path = match.group(2) if os.path.isabs(match.group(2)) else os.path.join(folder, match.group(2))
        if match.group(1) == "model_checkpoint_path":
            latest = path
        else:
            paths.append(path)
    if not latest:
        return None
    return paths if latest in paths else paths + [latest]


def unreadable_checkpoint_fix(path: str) -> str:
    """The fix for a checkpoint whose files cannot be read: the checkpoint listed just before it in its folder's
    index whose files are all there, or, without one, restoring the files or training again."""
    listed = [os.path.normpath(p) for p in listed_checkpoints(os.path.dirname(path)) or []]
    older = listed[: listed.index(os.path.normpath(path))] if os.path.normpath(path) in listed else []
    usable = next((p for p in reversed(older) if checkpoint_files_problem(p) is None), None)
    if usable:
        return f"pass an older checkpoint (--checkpoint={usable})"
    return "restore its files from a copy, or train again with the same command"


def too_few_checkpoints(
    folder: Union[str, os.PathLike], paths: List[str], num_checkpoints: int, name: str = "num_checkpoints"
) -> Optional[str]:
    """The error of averaging the last `num_checkpoints` of the checkpoints `paths` that `folder` lists, when it
    lists fewer, naming the setting `name` that asked; else None."""
    if len(paths) >= num_checkpoints:
        return None
    names = ", ".join(os.path.basename(path) for path in paths)
    return (
        f"{name}: asked to average the last {num_checkpoints} checkpoints, but {folder} has only {len(paths)} "
        f"({names}). Fix: {name}={len(paths)} or fewer, or train longer and keep more checkpoints (tft-train "
        "--keep_checkpoints)."
    )


def check_checkpoint_count(
    model_dir: Union[str, os.PathLike], num_checkpoints: int, name: str = "num_checkpoints"
) -> None:
    """Before TensorFlow starts: the ValueError averaging gives when `model_dir/checkpoints` lists fewer than
    `num_checkpoints` checkpoints; nothing when its index cannot be read here (averaging then decides)."""
    folder = pathlib.Path(model_dir) / CHECKPOINT_DIR
    paths = listed_checkpoints(folder)
    problem = too_few_checkpoints(folder, paths, num_checkpoints, name) if paths else None
    if problem is not None:
        raise ValueError(problem)


def check_latest_checkpoint(
    model_dir: Union[str, os.PathLike], checkpoint: Optional[str] = None, average_last: Optional[int] = None
) -> None:
    """Before TensorFlow starts: a CheckpointError, with the message loading it would give, when the latest
    checkpoint of `model_dir/checkpoints` misses a data file or has an empty index and is the one a command uses
    (no `checkpoint` and no `average_last` given: those are loading's to check), and averaging's ValueError when
    `average_last` (without `checkpoint`) asks for more checkpoints than the folder lists (`check_checkpoint_count`).
    Anything else (no index, a missing index file, a truncated or corrupted file) is left to loading, which reads
    the files."""
    if checkpoint is not None:
        return
    if average_last is not None:
        check_checkpoint_count(model_dir, average_last, "average_last")
        return
    paths = listed_checkpoints(pathlib.Path(model_dir) / CHECKPOINT_DIR)  # the folder as loading names it
    if not paths or not os.path.isfile(paths[-1] + ".index"):
        return
    problem = checkpoint_files_problem(paths[-1])
    if problem is not None:
        raise CheckpointError(
            f"checkpoint {paths[-1]} cannot be read: {problem}. Fix: {unreadable_checkpoint_fix(paths[-1])}.",
            paths[-1],
        )
