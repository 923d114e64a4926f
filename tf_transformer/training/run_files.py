"""The run's records in the model directory: the one writer of config.json, data_config.json, train_config.json
(the time budget's plan included) and data_report.json, and the check that a restart is the run they describe.

The other files of a model directory have one writer each too: vocab/ the run's vocabulary phase
(`run_data._vocabulary`), decoding.json `update_decoding_json` (called from here), checkpoints/ the
`tf.train.CheckpointManager` (its index also rewritten by `restore_newest_readable` when it sets a damaged
checkpoint aside), logs/ the TensorBoard callbacks and the training loops, best/ and logs/bleu `ValidationBleu`.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

from tf_transformer.config import ConfigError
from tf_transformer.decoding.settings import update_decoding_json
from tf_transformer.files import write_atomically
from tf_transformer.model_dir import CONFIG_FILE, DATA_CONFIG_FILE, DATA_REPORT_FILE, TRAIN_CONFIG_FILE
from tf_transformer.training.train_config import PLAN_KEY


def check_same_run(model_dir: pathlib.Path, file_name: str, config, ignore=()) -> None:
    """A model directory holds one run: a restart must use the settings (`config`, a config dataclass) it was
    started with.

    A field the file lacks counts as the field's default: a field added by a later version of the package has,
    for a run started before it, the value that run had (the default), so resuming that run is not refused."""
    path = model_dir / file_name
    if not path.is_file():
        return
    expected = config.to_dict()
    fields = dataclasses.fields(config)
    defaults = {field.name: field.default for field in fields if field.default is not dataclasses.MISSING}
    saved = {**defaults, **json.loads(path.read_text())}
    changed = sorted(
        key for key in set(saved) | set(expected) if key not in ignore and saved.get(key) != expected.get(key)
    )
    if changed:
        details = ", ".join(f"{key}: {saved.get(key)!r} -> {expected.get(key)!r}" for key in changed)
        raise ConfigError(
            f"{model_dir} holds a run with different settings in {file_name} ({details}). Fix: use a new "
            "--model_dir, or resume with the settings the run started with."
        )


def write_run_files(run, model_config, report, state, decoding) -> None:
    """The chief's record of the run (a `Run`) in model_dir, before the first checkpoint: decoding.json (from the
    `DecodingSettings` `decoding`), the resolved configs (the budget's plan, a fine-tuning run's source and the
    decoding settings given in train_config.json) and the training split's data report."""
    model_dir = run.model_dir
    update_decoding_json(model_dir, decoding)  # before train_config.json, whose record it compares with
    model_config.to_json(model_dir / CONFIG_FILE)
    run.data_config.to_json(model_dir / DATA_CONFIG_FILE)
    run.train_config.to_json(
        model_dir / TRAIN_CONFIG_FILE, precision=run.precision, initialized_from=state.initialized_from,
        budget=None if state.plan is None else state.plan.to_dict(), decoding=decoding.json_settings(),
    )  # fmt: skip
    report.to_json(model_dir / DATA_REPORT_FILE)


def write_plan(train_config_path: pathlib.Path, plan) -> None:
    """Replaces the time budget's plan (a `BudgetPlan`) in the train_config.json `write_run_files` wrote,
    atomically, keeping the rest."""
    path = pathlib.Path(train_config_path)
    values = json.loads(path.read_text(encoding="utf-8"))
    values[PLAN_KEY] = plan.to_dict()
    write_atomically(path, json.dumps(values, indent=2) + "\n")
