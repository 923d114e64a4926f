"""`TrainConfig`: how a run trains (the learning-rate schedule, label smoothing, the dropout rule, steps, checkpoints,
devices, precision), as opposed to what it trains (`TransformerConfig`)."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from typing import Any, Mapping, Optional, Union

from tf_transformer.config import ConfigError, JsonConfig, unknown_option
from tf_transformer.files import write_atomically
from tf_transformer.model_dir import DECODING_RECORD

STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker_mirrored", "tpu")
PRECISIONS = ("auto", "float32", "mixed_bfloat16", "mixed_float16")
BUDGET_SCHEDULES = ("auto", "on", "off")
# Written beside the fields in train_config.json: how "auto" precision was resolved (see `TrainConfig.to_json`)
# and a time-limited run's plan (`tf_transformer.training.budget`); they describe the run, so `from_dict` drops them.
PLAN_KEY = "budget"  # the time budget's plan (`budget.BudgetPlan.to_dict`)
RESOLUTION_FIELDS = ("mixed_precision_requested", "mixed_precision_reason", PLAN_KEY)
# A fine-tuning run's source (`fine_tuning.InitSource.record`), written beside the fields; it informs only.
INITIALIZED_FROM = "initialized_from"


def saved_values(path: Union[str, os.PathLike]) -> dict:
    """The values of a written train_config.json, records included ({} when it is missing or unreadable)."""
    try:
        values = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return values if isinstance(values, dict) else {}


@dataclasses.dataclass(frozen=True)
class TrainConfig(JsonConfig):
    """Settings of a training run, validated on creation and saved as `train_config.json`.

    Attributes:
        warmup_steps: warmup of the paper's learning-rate schedule (`WarmupSchedule`).
        learning_rate_scale: a constant multiplying the paper's learning-rate formula.
        label_smoothing: epsilon_ls of the training loss.
        dropout_by_epochs: None, or the dropout a run with a budget plan (`budget_schedule`) trains with, chosen
            from the epochs it predicts: "0:0.1,35:0.2" is 0.1 below 35 epochs and 0.2 from 35 on (pairs of
            epochs:dropout, ascending, the first at 0). The choice replaces the model's `dropout` once the run has
            predicted its steps (train_config.json's "budget" records it); runs without a plan train at the model's
            `dropout`. A recipe override of `dropout` alone (`--override=dropout=0.3`) turns the rule off.
        dropout_rule_parameters: None, or the `stack_parameters` of the model `dropout_by_epochs` was measured on:
            the rule then reads a model's planned epochs times its own `stack_parameters` over this count, so that
            a model with k times the weights reaches each threshold in 1/k the epochs (it overfits sooner:
            docs/multi30k.md, issue 40). None: the rule reads the epochs as they are, whatever the model's size.
        initial_dropout, initial_dropout_fraction: the first `initial_dropout_fraction` of a budget plan's steps
            (its segment's, fixed when the plan first predicts its end) train at `initial_dropout`, the rest at the
            dropout above (chosen or not): 0 then 0.1 is "late dropout", 0.1 then 0 "early dropout" (Liu et al.
            2023, "Dropout Reduces Underfitting"). 0 (the default): the dropout from the start. Needs a budget plan.
        model_dir: where checkpoints, logs, the vocabulary and the resolved configs go.
        train_steps: optimizer updates in total; a restarted run continues up to this number.
        time_limit_minutes: stop this run after this many minutes, counted from the start of `train`
            (vocabulary and data reading included), even before `train_steps`: the step in progress ends,
            the validation of the shortened epoch runs, and a checkpoint is saved at the step reached, so leave
            a minute or two of margin. A restart resumes from there with the limit counted anew (so "an hour
            on any machine, at most `train_steps`"). None: no limit. Not with "multi_worker_mirrored".
        budget_schedule: fit the learning rate to the run's budget (`tf_transformer.training.budget`; the plan
            goes in `train_config.json` under "budget"). "auto" (the default): with `time_limit_minutes`, predict the
            steps the limit holds from the run's measured step times, decay the rate linearly to zero at that step
            and stop there; without a limit, the schedule as it is. "on": the same, and without a time limit the
            rate decays to zero at `train_steps`. "off": the schedule as it is (a time limit cuts it off).
        budget_decay_fraction: the share of the planned steps the rate decays over (0 < f < 1).
        checkpoint_every: steps between checkpoints (also the period of validation).
        keep_checkpoints: how many recent checkpoints to keep (averaging needs several).
        strategy: "auto" (mirrored over all GPUs when there are several, else one device),
            "one_device" (`OneDeviceStrategy` on a GPU, TensorFlow's default strategy on the CPU), "mirrored",
            "multi_worker_mirrored" (reads TF_CONFIG) or "tpu".
        num_cpu_devices: split the CPU into this many logical devices (mirrored training without GPUs);
            0 leaves the CPU as it is.
        mixed_precision: "auto" (`mixed_bfloat16` where the hardware computes bf16 natively: GPUs of compute
            capability 8.0+, TPUs, CPUs with AVX-512 BF16 or AMX; float32 elsewhere; see
            `tf_transformer.training.precision.resolve_precision`), "float32", "mixed_bfloat16" or
            "mixed_float16". `train_config.json` holds the policy used, and for "auto" also
            `mixed_precision_requested` and `mixed_precision_reason`.
        jit_compile: compile the training step with XLA.
        log_every: steps between TensorBoard points (loss, learning rate, tokens/s).
        validation_batches: batches of the validation set per evaluation; 0 means all of it.
        bleu_every: steps between validation BLEU evaluations; 0 turns them off. Evaluations happen where
            checkpoints do: at the first checkpoint at or after each multiple of `bleu_every` steps (so use a
            multiple of `checkpoint_every`), and at the end of training. Each translates the first
            `bleu_sentences` validation pairs, scores them with sacreBLEU (BLEU, chrF, tokenized lowercased
            BLEU; `tf_transformer.evaluation.score_translations`), writes them to TensorBoard (`logs/bleu`,
            tags `validation/bleu`, `validation/chrf`, `validation/tok_lower_bleu`, at the global step) and
            logs one line. Needs a validation split; not supported with "multi_worker_mirrored".
        bleu_sentences: at most this many validation pairs are translated: the first ones in file order
            (after dropping pairs with an empty side), the same at every evaluation.
        bleu_beam_size: beam width of those translations (the paper's length penalty); 1 is greedy
            search, the fastest.
        keep_best: with `bleu_every`, keep the model with the highest validation BLEU so far in
            `model_dir/best` (a checkpoint of its weights and score, and `best.json`); a later evaluation
            replaces it only with a strictly higher BLEU, also across restarts. Load it with
            `checkpoint="best"` (commands: `--checkpoint=best`).
        seed: seeds weights, data order and dropout; None for a random run.
        deterministic: also makes TensorFlow ops deterministic (slower), for reproducible runs.
        init_from: fine-tuning: start a new model directory from another's weights and vocabulary, a model
            directory (its latest checkpoint) or a checkpoint prefix inside one (`.../checkpoints/ckpt-N`, an
            average); a fresh optimizer from step 0 (`tf_transformer.training.fine_tuning`). Ignored, with a log
            line, when `model_dir` holds checkpoints of its own: the run resumes them. `train_config.json` records
            the source under "initialized_from", kept across restarts.

    Unlike the model and data configs, a restart may change any of these but `model_dir` (e.g. train longer,
    evaluate BLEU more often or on more sentences, lower the learning rate); `train_config.json` holds the latest
    run's settings.
    """

    # How the model learns: what a preset's recipe sets (`tf_transformer.recipe`); tft-train has no flags for them.
    RECIPE_FIELDS = (
        "warmup_steps", "learning_rate_scale", "label_smoothing", "dropout_by_epochs", "dropout_rule_parameters",
        "initial_dropout", "initial_dropout_fraction",
    )  # fmt: skip

    model_dir: str
    train_steps: int = 100000
    time_limit_minutes: Optional[float] = None
    budget_schedule: str = "auto"
    budget_decay_fraction: float = 0.2
    checkpoint_every: int = 1000
    keep_checkpoints: int = 5
    strategy: str = "auto"
    num_cpu_devices: int = 0
    mixed_precision: str = "auto"
    jit_compile: bool = False
    log_every: int = 100
    validation_batches: int = 0
    bleu_every: int = 0
    bleu_sentences: int = 500
    bleu_beam_size: int = 1
    keep_best: bool = True
    seed: Optional[int] = None
    deterministic: bool = False
    init_from: Optional[str] = None
    warmup_steps: int = 4000
    learning_rate_scale: float = 1.0
    label_smoothing: float = 0.1
    dropout_by_epochs: Optional[str] = None
    dropout_rule_parameters: Optional[int] = None
    initial_dropout: float = 0.0
    initial_dropout_fraction: float = 0.0

    def __post_init__(self):
        self._check_field_types()
        self._check_recipe()
        if not self.model_dir:
            raise ConfigError("model_dir: empty. Fix: pass --model_dir, a directory for checkpoints and logs.")
        positive = (
            "train_steps",
            "checkpoint_every",
            "keep_checkpoints",
            "log_every",
            "bleu_sentences",
            "bleu_beam_size",
        )
        for name in positive:
            value = getattr(self, name)
            if value < 1:
                raise ConfigError(f"{name}: must be a positive integer, got {value!r}. Fix: set {name} >= 1.")
        for name in ("num_cpu_devices", "validation_batches", "bleu_every"):
            value = getattr(self, name)
            if value < 0:
                raise ConfigError(f"{name}: must be an integer >= 0, got {value!r}. Fix: set {name} >= 0.")
        if self.time_limit_minutes is not None and not self.time_limit_minutes > 0:
            raise ConfigError(
                f"time_limit_minutes: must be positive or null, got {self.time_limit_minutes!r}. Fix: set it > 0, "
                "or leave it out for no limit."
            )
        if not 0 < self.budget_decay_fraction < 1:
            raise ConfigError(
                f"budget_decay_fraction: must be between 0 and 1, got {self.budget_decay_fraction!r}. Fix: e.g. 0.2 "
                "(the learning rate decays over the last 20% of the predicted steps)."
            )
        if self.budget_schedule not in BUDGET_SCHEDULES:
            raise ConfigError(unknown_option("budget_schedule", self.budget_schedule, BUDGET_SCHEDULES))
        if self.strategy not in STRATEGIES:
            raise ConfigError(unknown_option("strategy", self.strategy, STRATEGIES))
        if self.mixed_precision not in PRECISIONS:
            raise ConfigError(unknown_option("mixed_precision", self.mixed_precision, PRECISIONS))

    def _check_recipe(self):
        """The schedule, label smoothing and dropout rule: positive, rates in [0, 1), a well-formed rule, and an
        initial dropout only with a budget plan."""
        if self.warmup_steps < 1:
            raise ConfigError(f"warmup_steps: must be positive, got {self.warmup_steps}. Fix: set warmup_steps >= 1.")
        if self.learning_rate_scale <= 0:
            raise ConfigError(
                f"learning_rate_scale: must be positive, got {self.learning_rate_scale}. Fix: use e.g. 1.0."
            )
        for name in ("label_smoothing", "initial_dropout", "initial_dropout_fraction"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ConfigError(f"{name}: must be in [0, 1), got {value}. Fix: use e.g. {name}=0.1.")
        self.dropout_rule()  # raises ConfigError when malformed
        if self.dropout_rule_parameters is not None and self.dropout_rule_parameters <= 0:
            raise ConfigError(
                f"dropout_rule_parameters: must be positive or null, got {self.dropout_rule_parameters}. Fix: set it "
                "to the stack_parameters of the model the dropout rule was measured on, or null."
            )
        if self.has_initial_dropout and not self.fits_budget:
            raise ConfigError(
                f"initial_dropout_fraction: {self.initial_dropout_fraction} of a budget plan's steps, but this run "
                "has no plan. Fix: give --time_limit_minutes (or --budget_schedule=on with --train_steps; neither "
                "with strategy=multi_worker_mirrored), or set initial_dropout_fraction=0."
            )

    def dropout_rule(self) -> tuple:
        """`dropout_by_epochs` as ((epochs, dropout), ...), ascending; () when None.

        Raises:
            ConfigError: not pairs of epochs:dropout, epochs not ascending from 0, or a dropout outside [0, 1).
        """
        if self.dropout_by_epochs is None:
            return ()
        fix = 'Fix: write epochs:dropout pairs, ascending from 0, e.g. dropout_by_epochs="0:0.1,35:0.2", or null.'
        pairs = []
        for item in self.dropout_by_epochs.split(","):
            epochs, separator, rate = item.partition(":")
            try:
                pair = (float(epochs), float(rate))
            except ValueError:
                pair = None
            if not separator or pair is None:
                raise ConfigError(f"dropout_by_epochs: {item.strip()!r} is not epochs:dropout. {fix}")
            if not 0.0 <= pair[1] < 1.0:
                raise ConfigError(f"dropout_by_epochs: the dropout of {item.strip()!r} is not in [0, 1). {fix}")
            pairs.append(pair)
        epochs = [pair[0] for pair in pairs]
        if epochs[0] != 0 or any(later <= earlier for earlier, later in zip(epochs[:-1], epochs[1:], strict=True)):
            raise ConfigError(f"dropout_by_epochs: the epochs {epochs} do not ascend from 0. {fix}")
        return tuple(pairs)

    @property
    def has_initial_dropout(self) -> bool:
        """Whether a budget plan trains its first steps at `initial_dropout` (`initial_dropout_fraction` > 0)."""
        return self.initial_dropout_fraction > 0

    def dropout_rule_scale(self, model_config) -> float:
        """What the dropout rule multiplies a run's epochs by: the model's `stack_parameters` over
        `dropout_rule_parameters` (1.0 when that is None)."""
        if self.dropout_rule_parameters is None:
            return 1.0
        return model_config.stack_parameters / self.dropout_rule_parameters

    def dropout_for_epochs(self, epochs: float, model_config) -> float:
        """The dropout `dropout_by_epochs` gives a run of `epochs` epochs of `model_config` (a `TransformerConfig`;
        its `dropout` when the rule is None or gives none), read at the model's size (`dropout_rule_scale`)."""
        rate = model_config.dropout
        scaled_epochs = epochs * self.dropout_rule_scale(model_config)
        for threshold, rule_rate in self.dropout_rule():
            if scaled_epochs >= threshold:
                rate = rule_rate
        return rate

    @property
    def fits_budget(self) -> bool:
        """Whether the run fits its learning rate to its budget: `budget_schedule` "on", or "auto" with a time limit."""
        return self.budget_schedule == "on" or (self.budget_schedule == "auto" and self.time_limit_minutes is not None)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]):
        """`JsonConfig.from_dict`, dropping the records of a written `train_config.json` (precision, a fine-tuning
        run's `initialized_from`, the decoding settings), so that it loads as the run it describes (with the policy it
        trained in)."""
        if isinstance(values, Mapping):
            records = (*RESOLUTION_FIELDS, INITIALIZED_FROM, DECODING_RECORD)
            values = {key: value for key, value in values.items() if key not in records}
        return super().from_dict(values)

    def to_json(
        self,
        path: Union[str, os.PathLike, None] = None,
        precision: Optional[tuple] = None,
        initialized_from: Optional[dict] = None,
        budget: Optional[dict] = None,
        decoding: Optional[dict] = None,
    ) -> str:
        """Returns the config as JSON text; with `path`, also writes it there (atomically).

        `precision`, the (policy, reason) `resolve_precision` gave: `mixed_precision` then holds the policy the
        run trains in, and when that was resolved from "auto", `mixed_precision_requested` and
        `mixed_precision_reason` say so (a restart resolves "auto" again, perhaps on other hardware).
        `initialized_from`, a fine-tuning run's source (path, checkpoint, step), is written under that key;
        `budget`, the time budget's plan (`BudgetPlan.to_dict`), under "budget", in the same write (a stop between
        two writes would leave a file without the plan that a restart continues); `decoding`, the decoding.json
        settings the run was given (`DecodingSettings.json_settings`), under "decoding": a restart that gives the same
        keeps an edited or tuned decoding.json (`update_decoding_json`).
        """
        values = self.to_dict()
        if precision is not None and precision[0] != self.mixed_precision:
            values.update(mixed_precision=precision[0], mixed_precision_requested=self.mixed_precision)
            values["mixed_precision_reason"] = precision[1]
        if initialized_from is not None:
            values[INITIALIZED_FROM] = initialized_from
        if budget is not None:
            values[PLAN_KEY] = budget
        if decoding is not None:
            values[DECODING_RECORD] = decoding
        text = json.dumps(values, indent=2) + "\n"
        if path is not None:
            write_atomically(path, text)
        return text
