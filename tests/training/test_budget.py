"""Training that knows its budget (tf_transformer.training.budget): the schedule against NumPy, the prediction on a
fake clock, the restarts' plans, and a tiny time-limited run whose learning rate ends near zero."""

import json
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_transformer as tft
from tf_transformer.config import ConfigError
from tf_transformer.data import DataConfig
from tf_transformer.training import TrainConfig, train
from tf_transformer.training.budget import BudgetPlan, BudgetTiming, FitToBudget, plan_for_start, read_plan
from tf_transformer.training.schedule import BudgetSchedule, WarmupSchedule


def paper_rate(step, d_model, warmup, scale=1.0):
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def budget_rate(step, d_model, warmup, rewarm_start, rewarm_steps, decay_start, decay_end):
    rate = paper_rate(step, d_model, warmup)
    if rewarm_steps:
        rate *= min(max((step + 1 - rewarm_start) / rewarm_steps, 0.0), 1.0)
    if decay_end:
        rate *= min(max((decay_end - step) / (decay_end - decay_start), 0.0), 1.0)
    return rate


@pytest.mark.parametrize(
    "plan",
    [
        dict(rewarm_start=0, rewarm_steps=0, decay_start=0, decay_end=0),  # off: the paper's schedule
        dict(rewarm_start=0, rewarm_steps=0, decay_start=800, decay_end=1000),
        dict(rewarm_start=1000, rewarm_steps=50, decay_start=1600, decay_end=2000),
    ],
)
def test_the_budget_schedule_matches_a_numpy_reference(plan):
    schedule = BudgetSchedule(WarmupSchedule(d_model=128, warmup_steps=100))
    schedule.set_plan(**plan)
    steps = [0, 1, 50, 99, 500, 799, 800, 900, 999, 1000, 1001, 1010, 1049, 1050, 1500, 1700, 1999, 2000, 2500]
    expected = [budget_rate(step, 128, 100, **plan) for step in steps]
    np.testing.assert_allclose([float(schedule(step)) for step in steps], expected, rtol=1e-6, atol=1e-12)
    if plan["decay_end"]:  # the last step's rate is near zero, and it is zero from the end on
        end = plan["decay_end"]
        assert float(schedule(end - 1)) < 0.01 * float(WarmupSchedule(128, 100)(end - 1))
        assert float(schedule(end)) == 0.0


def test_the_schedule_follows_a_plan_set_after_tracing():
    schedule = BudgetSchedule(WarmupSchedule(d_model=128, warmup_steps=100))
    rate = tf.function(schedule)
    before = float(rate(tf.constant(900)))
    schedule.set_plan(decay_start=800, decay_end=1000)
    assert float(rate(tf.constant(900))) == pytest.approx(before / 2, rel=1e-6)
    restored = BudgetSchedule.from_config(schedule.get_config())
    assert float(restored(900)) == pytest.approx(before / 2, rel=1e-6)


class FakeModel:
    """What FitToBudget uses of a model: `stop_training` and the dropout hook (`set_dropout`)."""

    stop_training = False

    def __init__(self, apply_dropout=None):
        self.apply_dropout = apply_dropout

    def set_dropout(self, rate, rebuild_train_function=False):
        assert rebuild_train_function  # a fit in progress: the next step must train at the new rate
        self.apply_dropout(rate)


def drive(callback, step, seconds_per_step, steps):
    """Runs `steps` fake training steps of `seconds_per_step` each through the callback."""
    for _ in range(steps):
        step.assign_add(1)
        callback.clock.now += seconds_per_step
        callback.on_train_batch_end(0)
        if callback.model.stop_training:
            break


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def make_callback(
    plan, limit_seconds=100.0, train_steps=100_000, start=0, window_fraction=0.5, pause_every=None, **dropout
):
    schedule = BudgetSchedule(WarmupSchedule(d_model=128, warmup_steps=100))
    step = tf.Variable(start, dtype=tf.int64)
    saved = []
    timing = BudgetTiming(
        deadline=limit_seconds, time_limit_seconds=limit_seconds, train_steps=train_steps, calibration_steps=100,
        repredict_every=250, window_fraction=window_fraction, pause_every=pause_every,
        steps_per_epoch=dropout.get("steps_per_epoch"),
    )  # fmt: skip
    callback = FitToBudget(
        schedule, plan, step, timing, on_plan=lambda plan: saved.append(plan.to_dict()),
        choose_dropout=dropout.get("choose_dropout"), initial_dropout=dropout.get("initial_dropout"), clock=Clock(),
    )  # fmt: skip
    callback.set_model(FakeModel(dropout.get("apply_dropout")))
    callback.on_train_begin()
    return callback, schedule, step, saved


def test_the_run_predicts_its_steps_from_measured_step_times_and_stops_at_the_planned_end():
    callback, schedule, step, saved = make_callback(BudgetPlan(time_limit_minutes=100 / 60))
    drive(callback, step, 0.1, 101)  # the first step starts the timing; 100 more are timed
    plan = callback.plan
    # 100 s - 2% reserve = 98 s; 10.1 s used: 87.9 s / 0.1 s = 879 steps left after step 101.
    assert (plan.predicted_at_step, plan.end_step) == (101, 980)
    assert plan.decay_start == 980 - 196 and not plan.frozen
    assert float(schedule.decay_end.numpy()) == 980.0
    # Slower steps from here: the next prediction (250 steps on) moves the end earlier.
    drive(callback, step, 0.2, 250)
    assert callback.plan.predicted_at_step == 351 and callback.plan.end_step < 980
    drive(callback, step, 0.2, 10_000)
    assert callback.plan.frozen and int(step.numpy()) == callback.plan.end_step
    assert callback.model.stop_training
    assert float(schedule(callback.plan.end_step)) == 0.0
    # The clock: the end comes before the deadline, not after it.
    assert callback.clock.now <= 100.0
    assert saved[-1] == callback.plan.to_dict() and len(saved) >= 3  # begin, first prediction, the changes


def test_a_fixed_end_moves_earlier_when_the_steps_become_slower_than_predicted():
    callback, schedule, step, saved = make_callback(BudgetPlan(time_limit_minutes=100 / 60))
    drive(callback, step, 0.1, 101)  # predicted: end 980, decay from 784
    drive(callback, step, 0.1, 600)  # frozen before the decay (784 <= 701 + 250)
    assert callback.plan.frozen and callback.plan.end_step in (979, 980)  # float rounding of the clock
    drive(callback, step, 0.3, 10_000)  # three times slower from step 702
    plan = callback.plan
    assert plan.end_step < 979 and int(step.numpy()) == plan.end_step and callback.model.stop_training
    assert callback.clock.now <= 100.0 and float(schedule(plan.end_step)) == 0.0
    # The decay steepened (decay_start stays): the last step has 1 / (end - decay_start) of the rate.
    assert float(schedule(plan.end_step - 1)) < 0.1 * float(schedule.schedule(plan.end_step - 1))
    assert saved[-1] == plan.to_dict()


def test_an_epoch_end_pause_counts_as_its_share_of_each_step_of_the_epoch():
    callback, _, step, _ = make_callback(BudgetPlan(time_limit_minutes=100 / 60), pause_every=200)
    drive(callback, step, 0.1, 51)
    callback.on_epoch_begin(1)  # validation and a checkpoint: 3.9 s, then the next step (0.1 s)
    callback.clock.now += 3.9
    drive(callback, step, 0.1, 50)  # the calibration's 100 steps end at step 101, 14.0 s in
    plan = callback.plan
    # The steps: 9.9 s / 100 = 0.099 s; the pause: 4.0 s / 200 steps = 0.02 s a step. 98 s - 14 s = 84 s left:
    # 705 steps. Counting the pause in the 100 steps (0.139 s a step) would have planned 604.
    assert plan.predicted_at_step == 101 and plan.seconds_per_step == pytest.approx(0.119)
    assert plan.end_step in (805, 806)  # float rounding of the clock


def test_a_validation_pass_after_the_end_is_fixed_does_not_move_it():
    callback, _, step, saved = make_callback(BudgetPlan(time_limit_minutes=100 / 60))
    drive(callback, step, 0.1, 101)
    drive(callback, step, 0.1, 700)  # frozen before the decay, then 100 steps of the predicted speed
    end = callback.plan.end_step
    assert callback.plan.frozen and end in (979, 980)
    plans = len(saved)
    # Validation and a checkpoint between two steps: one 20-step window a quarter slower. The time left still
    # holds the planned steps (by 0.5 s), so the end stays; a guard that trusted one window moved it to step 952.
    callback.clock.now += 0.5
    drive(callback, step, 0.1, 10_000)
    assert callback.plan.end_step == end and int(step.numpy()) == end and len(saved) == plans
    assert callback.clock.now <= 100.0


def test_slow_steps_are_predicted_after_a_share_of_the_limit_not_after_the_calibration_steps():
    callback, _, step, _ = make_callback(BudgetPlan(time_limit_minutes=100 / 60), window_fraction=0.05)
    drive(callback, step, 1.0, 6)  # 5 s = 5% of the limit after the first step
    # 98 s - 6 s used = 92 steps of 1 s left after step 6.
    assert (callback.plan.predicted_at_step, callback.plan.end_step) == (6, 98)


def test_the_planned_end_never_passes_train_steps():
    callback, _, step, _ = make_callback(BudgetPlan(time_limit_minutes=100 / 60), train_steps=500)
    drive(callback, step, 0.01, 10_000)
    assert (callback.plan.end_step, int(step.numpy())) == (500, 500)
    assert callback.plan.decay_start == 400


def dropout_rule(epochs):
    return 0.1 if epochs < 35 else 0.2  # configs/multi30k.json's rule below 80 epochs


def test_the_dropout_is_chosen_once_from_the_predicted_epochs_and_the_retrace_is_not_timed():
    applied = []
    callback, _, step, saved = make_callback(
        BudgetPlan(time_limit_minutes=100 / 60), steps_per_epoch=20, choose_dropout=dropout_rule,
        apply_dropout=applied.append,
    )  # fmt: skip
    assert applied == [] and callback.plan.dropout is None  # calibrating: the config's dropout
    drive(callback, step, 0.1, 101)  # predicted: end 980 = 49 epochs of 20 steps
    assert (callback.plan.end_step, callback.plan.epochs, callback.plan.dropout) == (980, 49.0, 0.2)
    assert applied == [0.2] and saved[-1]["dropout"] == 0.2 and saved[-1]["epochs"] == 49.0
    # The next step traces the training function again (3 s): it must not read as slow steps.
    step.assign_add(1)
    callback.clock.now += 3.0
    callback.on_train_batch_end(0)
    drive(callback, step, 0.1, 250)
    assert callback.plan.seconds_per_step == pytest.approx(0.1)
    # Later predictions move the end (here earlier, by the 3 s) but keep the dropout: one retrace a segment.
    assert callback.plan.end_step < 980 and applied == [0.2] and callback.plan.dropout == 0.2
    assert "dropout 0.2, chosen for 49.0 epochs" in callback.plan.describe()


def test_a_resumed_plan_keeps_its_dropout_and_a_plan_to_train_steps_chooses_at_the_start():
    applied = []
    kept = BudgetPlan(58.0, 0, 0, 0.2, 0.45, 1000, 7000, 5600, True, epochs=24.2, dropout=0.1)
    callback, _, step, _ = make_callback(
        kept, steps_per_epoch=289, choose_dropout=dropout_rule, apply_dropout=applied.append
    )  # fmt: skip
    drive(callback, step, 0.1, 200)
    assert applied == [0.1] and callback.plan.dropout == 0.1  # set again before the first step, never re-chosen
    applied.clear()
    stepped = plan_for_start(None, 0, None, 0.2, rewarm_steps=500, train_steps=13_000)
    make_callback(stepped, steps_per_epoch=289, choose_dropout=dropout_rule, apply_dropout=applied.append)
    assert applied == [0.2] and (stepped.epochs, stepped.dropout) == (44.98, 0.2)
    # Without a rule nothing is chosen or applied.
    plain = plan_for_start(None, 0, None, 0.2, rewarm_steps=500, train_steps=13_000)
    make_callback(plain, steps_per_epoch=289, apply_dropout=applied.append)
    assert plain.dropout is None and applied == [0.2]


def test_late_dropout_trains_the_first_share_of_the_planned_steps_at_the_initial_rate():
    applied = []
    callback, _, step, saved = make_callback(
        BudgetPlan(time_limit_minutes=100 / 60), steps_per_epoch=20, choose_dropout=dropout_rule,
        initial_dropout=(0.0, 0.5), apply_dropout=applied.append,
    )  # fmt: skip
    assert applied == [0.0]  # from the first step, before the first trace
    drive(callback, step, 0.1, 101)  # predicted: end 980 = 49 epochs: 0.2, from half the steps on
    plan = callback.plan
    assert (plan.end_step, plan.dropout, plan.dropout_from_step) == (980, 0.2, 490)
    assert applied == [0.0] and saved[-1]["dropout_from_step"] == 490  # no retrace at the choice
    assert "dropout 0.2, chosen for 49.0 epochs, after step 490" in plan.describe()
    drive(callback, step, 0.1, 388)
    assert int(step.numpy()) == 489 and applied == [0.0]
    drive(callback, step, 0.1, 1)
    assert applied == [0.0, 0.2]  # after step 490: the steps from 491 on train at 0.2
    # The next step holds the new trace (3 s): it must not read as slow steps.
    step.assign_add(1)
    callback.clock.now += 3.0
    callback.on_train_batch_end(0)
    drive(callback, step, 0.1, 1000)
    assert applied == [0.0, 0.2] and int(step.numpy()) == plan.end_step
    assert plan.seconds_per_step == pytest.approx(0.1)
    assert plan.dropout_from_step == 490  # fixed when chosen; the end moved by the 3 s at most
    assert plan.end_step >= 980 - 3.0 / 0.1 - 1, plan


@pytest.mark.parametrize("start, expected", [(300, [0.0, 0.2]), (600, [0.2])])
def test_a_resumed_plan_keeps_its_initial_phase(start, expected):
    applied = []
    kept = BudgetPlan(58.0, 0, 0, 0.2, 0.45, 100, 980, 784, True, epochs=49.0, dropout=0.2, dropout_from_step=490)
    callback, _, step, _ = make_callback(
        kept, start=start, steps_per_epoch=20, choose_dropout=dropout_rule, initial_dropout=(0.0, 0.5),
        apply_dropout=applied.append,
    )  # fmt: skip
    drive(callback, step, 0.1, 300)
    assert applied == expected and callback.plan.dropout_from_step == 490


def test_early_dropout_on_a_plan_to_train_steps_starts_at_the_segment():
    # A later segment (from step 2,000; a plan to train_steps chooses at the start): 0.3 for its first quarter.
    applied = []
    previous = BudgetPlan(None, 0, 0, 0.2, None, None, 2000, 1600, True, epochs=6.92, dropout=0.1)
    plan = plan_for_start(previous, 2000, None, 0.2, rewarm_steps=500, train_steps=6000)
    callback, _, step, _ = make_callback(
        plan, start=2000, steps_per_epoch=289, choose_dropout=lambda epochs: 0.0, initial_dropout=(0.3, 0.25),
        apply_dropout=applied.append,
    )  # fmt: skip
    assert (plan.dropout, plan.dropout_from_step, applied) == (0.0, 3000, [0.3])
    drive(callback, step, 0.1, 1500)
    assert applied == [0.3, 0.0]


def test_the_initial_dropout_of_a_config_and_its_errors(tmp_path):
    config = TrainConfig(model_dir="run", initial_dropout=0.0, initial_dropout_fraction=0.4, budget_schedule="on")
    assert config.has_initial_dropout and not TrainConfig(model_dir="run").has_initial_dropout
    for name in ("initial_dropout", "initial_dropout_fraction"):
        with pytest.raises(ConfigError, match=f"^{name}: must be in \\[0, 1\\), got 1.0. Fix"):
            TrainConfig(model_dir="run", **{name: 1.0})
    # Only a budget plan has steps to share: a run without one is refused when its settings are made.
    unplanned = dict(model_dir=str(tmp_path), train_steps=10, seed=1, initial_dropout_fraction=0.4)
    with pytest.raises(ConfigError, match="^initial_dropout_fraction: 0.4 of a budget plan's steps.*Fix: give"):
        TrainConfig(**unplanned)
    TrainConfig(**unplanned, budget_schedule="on")
    TrainConfig(**unplanned, time_limit_minutes=5.0)


def test_the_dropout_rule_of_a_config_and_its_errors():
    model = tft.TransformerConfig(dropout=0.1)
    config = TrainConfig(model_dir="run", dropout_by_epochs="0:0.1, 35:0.2, 80:0.3")
    assert config.dropout_rule() == ((0.0, 0.1), (35.0, 0.2), (80.0, 0.3))
    assert [config.dropout_for_epochs(epochs, model) for epochs in (0, 24.5, 35, 44.9, 80, 500)] == [
        0.1, 0.1, 0.2, 0.2, 0.3, 0.3
    ]  # fmt: skip
    # No rule: the model's dropout.
    assert TrainConfig(model_dir="run").dropout_for_epochs(100, tft.TransformerConfig(dropout=0.25)) == 0.25
    recipe = tft.Recipe(model, {"dropout_by_epochs": config.dropout_by_epochs})

    def rule(recipe):
        return TrainConfig(model_dir="run", **recipe.training)

    assert rule(recipe.with_overrides(["dropout_by_epochs=null"])).dropout_rule() == ()
    # An explicit dropout is what the run trains at: it turns the rule off, unless the rule is given too.
    assert rule(recipe.with_overrides(["dropout=0.3"])).dropout_rule() == ()
    both = recipe.with_overrides(["dropout=0.3", "dropout_by_epochs=0:0.3,50:0.4"])
    assert rule(both).dropout_for_epochs(60, both.model) == 0.4
    assert rule(recipe.with_overrides(["d_model=256"])).dropout_rule() == config.dropout_rule()
    for bad, message in [
        ("0:0.1,35", "'35' is not epochs:dropout"),
        ("0:0.1,x:0.2", "'x:0.2' is not epochs:dropout"),
        ("0:0.1,35:1.5", "the dropout of '35:1.5' is not in \\[0, 1\\)"),
        ("10:0.1,35:0.2", "do not ascend from 0"),
        ("0:0.1,35:0.2,30:0.3", "do not ascend from 0"),
    ]:
        with pytest.raises(ConfigError, match=f"^dropout_by_epochs: .*{message}.* Fix: write epochs:dropout pairs"):
            TrainConfig(model_dir="run", dropout_by_epochs=bad)


def test_the_dropout_rule_reads_epochs_at_the_models_size():
    tiny = tft.TransformerConfig(d_model=128, d_ff=256, num_heads=4, num_encoder_layers=4, num_decoder_layers=4)
    rule = TrainConfig(model_dir="run", dropout_by_epochs="0:0.1,35:0.2,80:0.3", dropout_rule_parameters=1_310_720)
    # The weight matrices by hand: 4 attention projections of d_model x d_model, two feed-forward kernels.
    attention, feed_forward = 4 * 128 * 128, 2 * 128 * 256
    assert tiny.stack_parameters == 4 * (attention + feed_forward) + 4 * (2 * attention + feed_forward) == 1_310_720
    assert rule.dropout_rule_scale(tiny) == 1.0 and rule.dropout_for_epochs(40, tiny) == 0.2  # the size measured on
    wide = tiny.with_overrides(["d_model=256", "d_ff=1024", "num_encoder_layers=3", "num_decoder_layers=3"])
    assert rule.dropout_rule_scale(wide) == pytest.approx(5_505_024 / 1_310_720)  # 4.2x the weights
    # The issue-40 probe: 33 planned epochs chose 0.1 and overfitted; at its size they read as 139 epochs.
    assert [rule.dropout_for_epochs(epochs, wide) for epochs in (8, 10, 19.9, 33)] == [0.1, 0.2, 0.3, 0.3]
    assert rule.with_overrides(["dropout_rule_parameters=null"]).dropout_for_epochs(33, wide) == 0.1
    with pytest.raises(ConfigError, match="^dropout_rule_parameters: must be positive or null, got 0. Fix: "):
        rule.replace(dropout_rule_parameters=0)


def test_stack_parameters_count_the_built_models_layer_kernels():
    config = tft.TransformerConfig(
        vocab_size=50, d_model=24, d_ff=40, num_heads=3, d_k=5, d_v=7, num_encoder_layers=2, num_decoder_layers=3
    )
    model = tft.Transformer(config)
    model.build()
    kernels = [v for v in model.trainable_weights if "/layer_" in v.path and v.path.endswith("kernel")]
    assert {v.path.split("/")[1] for v in kernels} == {"encoder", "decoder"}
    assert sum(int(np.prod(v.shape)) for v in kernels) == config.stack_parameters


def test_setting_the_dropout_takes_effect_once_the_training_function_is_rebuilt():
    # Seeded: with 32 target tokens a draw of masks moves the loss by 0.01-0.3 either way, and by chance (once in a
    # .ci/run) by less than the 1e-3 asserted below; seed 0 moves it by 0.33 and 0.13.
    keras.utils.set_random_seed(0)
    config = tft.TransformerConfig.from_preset("tiny").replace(
        d_model=16, d_ff=32, num_encoder_layers=1, num_decoder_layers=1, dropout=0.5, attention_dropout=0.0
    )
    model = tft.Transformer(config)
    # A learning rate of 0: the weights stay, so the training loss differs from the evaluation loss by dropout alone.
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss=tft.MaskedCrossEntropy(0.0))
    rng = np.random.default_rng(0)
    source, target = rng.integers(3, 100, size=(4, 9)), rng.integers(3, 100, size=(4, 8))
    batch = ((source, target[:, :-1]), target[:, 1:])
    evaluated = model.evaluate(*batch, verbose=0)
    assert abs(model.train_on_batch(*batch) - evaluated) > 1e-3  # dropout 0.5 is on
    model.set_dropout(0.0)
    assert abs(model.train_on_batch(*batch) - evaluated) > 1e-3  # the traced function still drops out
    model.set_dropout(0.0, rebuild_train_function=True)
    assert model.train_on_batch(*batch) == pytest.approx(evaluated, rel=1e-5)
    assert model.config.dropout == 0.0 and model.embedding_dropout.rate == 0.0
    assert {layer.dropout_layer.rate for layer in (*model.encoder.layers, *model.decoder.layers)} == {0.0}
    # Keras gives a dropout layer its random state only when built with a positive rate: said, with the fix.
    with pytest.raises(ConfigError, match="^dropout: this model was built with dropout 0, .* Fix: build it with"):
        tft.Transformer(config.replace(dropout=0.0)).set_dropout(0.1)


def test_restarts_continue_the_plan_or_start_a_new_segment_with_a_rewarmup():
    first = plan_for_start(None, 0, 58.0, 0.2, rewarm_steps=500, train_steps=30_000)
    assert (first.segment_start, first.rewarm_steps, first.end_step) == (0, 0, None)
    predicted = BudgetPlan(58.0, 0, 0, 0.2, 0.45, 1000, 7000, 5600, False)
    # Interrupted before the planned end: the same plan, frozen (the uninterrupted run's schedule).
    resumed = plan_for_start(predicted, 845, 58.0, 0.2, rewarm_steps=500, train_steps=30_000)
    assert resumed == BudgetPlan(58.0, 0, 0, 0.2, 0.45, 1000, 7000, 5600, True)
    # The plan was carried out: "run it again to go on" re-warms and plans a new segment for the new limit.
    again = plan_for_start(predicted, 7000, 30.0, 0.2, rewarm_steps=500, train_steps=30_000)
    assert (again.segment_start, again.rewarm_steps, again.end_step) == (7000, 500, None)
    assert again.time_limit_minutes == 30.0
    # Interrupted while calibrating: the same segment, predicted anew.
    calibrating = BudgetPlan(58.0, segment_start=7000, rewarm_steps=500)
    assert plan_for_start(calibrating, 7050, 58.0, 0.2, rewarm_steps=500, train_steps=30_000) == calibrating
    # A model_dir trained without a time limit (no plan): its first budgeted start keeps the rate's level.
    assert plan_for_start(None, 3000, 58.0, 0.2, rewarm_steps=500, train_steps=30_000).rewarm_steps == 0


def test_train_config_json_holds_the_plan_and_still_loads_as_the_run(tmp_path):
    config = TrainConfig(model_dir=str(tmp_path), time_limit_minutes=58.0)
    plan = BudgetPlan(58.0, 0, 0, 0.2, 0.45, 1000, 7000, 5600, False)
    config.to_json(tmp_path / "train_config.json", budget=plan.to_dict())  # one write, the plan included
    assert read_plan(tmp_path / "train_config.json") == plan
    assert TrainConfig.from_json(tmp_path / "train_config.json") == config
    config.to_json(tmp_path / "train_config.json")
    assert read_plan(tmp_path / "train_config.json") is None


def test_without_a_time_limit_the_plan_ends_at_train_steps_and_a_larger_train_steps_moves_it():
    plan = plan_for_start(None, 0, None, 0.2, rewarm_steps=500, train_steps=7000)
    assert (plan.segment_start, plan.decay_start, plan.end_step, plan.frozen) == (0, 5600, 7000, True)
    # Interrupted at 3000, resumed with 8000 steps: the same segment, its decay moved to the new end.
    moved = plan_for_start(plan, 3000, None, 0.2, rewarm_steps=500, train_steps=8000)
    assert (moved.segment_start, moved.rewarm_steps, moved.decay_start, moved.end_step) == (0, 0, 6400, 8000)
    # Completed, then 2000 more: a new segment, re-warmed.
    more = plan_for_start(plan, 7000, None, 0.2, rewarm_steps=500, train_steps=9000)
    assert (more.segment_start, more.rewarm_steps, more.decay_start, more.end_step) == (7000, 500, 8600, 9000)


def test_a_bad_decay_fraction_is_refused_with_its_fix():
    with pytest.raises(ConfigError, match="^budget_decay_fraction: must be between 0 and 1, got 1.5. Fix"):
        TrainConfig(model_dir="runs/x", budget_decay_fraction=1.5)
    with pytest.raises(ConfigError, match="^budget_schedule: "):
        TrainConfig(model_dir="runs/x", budget_schedule="yes")


def test_by_default_only_a_time_limited_run_fits_its_budget():
    assert TrainConfig(model_dir="runs/x").budget_schedule == "auto"
    assert TrainConfig(model_dir="runs/x", time_limit_minutes=58).fits_budget
    assert not TrainConfig(model_dir="runs/x").fits_budget  # no limit: the schedule as it is, unless asked
    assert TrainConfig(model_dir="runs/x", budget_schedule="on").fits_budget
    assert not TrainConfig(model_dir="runs/x", time_limit_minutes=58, budget_schedule="off").fits_budget


def learning_rates(model_dir):
    rates = {}
    for events in (model_dir / "logs" / "train").glob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(events)):
            for value in event.summary.value:
                if value.tag == "learning_rate":
                    rates[event.step] = float(tf.make_ndarray(value.tensor))
    return [rates[step] for step in sorted(rates)]


def tiny_model_and_data(small_corpus, **changes):
    """A one-layer model without dropout, its training settings (`changes` go to the model or to those) and the small
    corpus's files: runs of a few seconds."""
    small = dict(d_model=32, d_ff=64, num_encoder_layers=1, num_decoder_layers=1, dropout=0.0, warmup_steps=20)
    recipe = tft.Recipe.load("tiny").replace(**{**small, **changes})
    data = DataConfig(
        dataset="files", train_source=str(small_corpus["train_en"]), train_target=str(small_corpus["train_de"]),
        vocab_size=500, batch_tokens=512, max_length=32, seed=1,
    )  # fmt: skip
    return recipe.model, data, recipe.training


def dropout_states(checkpoint):
    """The dropout seed generators' states a training checkpoint holds (tf_transformer.training.resume_state): each
    generator's counter advances by one for every call of its dropout layer at a positive rate, none at rate 0."""
    reader = tf.train.load_checkpoint(checkpoint)
    names = sorted(name for name in reader.get_variable_to_shape_map() if name.startswith("input_state/random/"))
    return np.stack([reader.get_tensor(name).astype(np.int64) for name in names])


def test_a_time_limited_run_ends_its_learning_rate_at_zero_then_a_new_segment_chooses_its_dropout_and_trains_on(
    tmp_path, small_corpus, monkeypatch
):
    # One model_dir, three runs: a step to build the vocabulary and trace, a time-limited run that ends at its
    # planned end, and a new segment whose limit it does not reach (its plan ends at train_steps).
    model, data, training = tiny_model_and_data(small_corpus, dropout_by_epochs="0:0.3,1000:0.1")
    rates_set = []  # every dropout set on the trained model (its build at the rule's highest rate, then 0, ...)
    set_dropout = tft.Transformer.set_dropout

    def recording_set_dropout(self, rate, **options):
        rates_set.append(rate)
        set_dropout(self, rate, **options)

    monkeypatch.setattr(tft.Transformer, "set_dropout", recording_set_dropout)
    # budget_schedule left at its default, "auto": a time limit is enough. log_every=1: the last steps' rates.
    # checkpoint_every=1000: no epoch-end pause (a checkpoint) inside the limited run.
    config = TrainConfig(
        model_dir=str(tmp_path), train_steps=100_000, checkpoint_every=1000, log_every=1, seed=1, **training
    )
    # One step without a limit first: the vocabulary is built. The limit counts the start of the run (reading,
    # building, tracing: 13 s on an idle machine, 30 s on a busy one), so it is this step's time and 30 s more: the
    # limited run has about 30 s of steps however fast the machine, reaches its first prediction, and has time left
    # for the training function's new trace that the dropout chosen there needs (with 15 s, a run on three busy
    # test workers spent what was left on it and ended by the clock at step 20 of a plan of 98).
    started = time.monotonic()
    first = train(model, data, config.replace(train_steps=1))
    limit_minutes = round((time.monotonic() - started + 30) / 60, 3)
    result = train(model, data, config.replace(time_limit_minutes=limit_minutes))
    plan = read_plan(tmp_path / "train_config.json")
    assert result.status == "time_limit" and plan.frozen and result.step == plan.end_step, plan
    assert result.planned_end == plan.end_step  # tft-train then says the plan, not the clock, ended it
    assert (plan.segment_start, plan.rewarm_steps) == (1, 0)  # a model_dir without a plan keeps its rate's level
    # The decay spans the last 20% of the predicted steps, or fewer when slower steps moved the end earlier.
    assert plan.decay_start < plan.end_step
    assert plan.dropout == 0.3  # chosen at the first prediction too
    # The logged rates against the paper's schedule (NumPy, the model's d_model, warmup and scale), undecayed.
    end, decay_start = plan.end_step, plan.decay_start
    rates = learning_rates(tmp_path)  # one a step, from step 1 (the warm-up run's) to the end
    undecayed = [paper_rate(step, 32, 20, training["learning_rate_scale"]) for step in range(1, end + 1)]
    assert len(rates) == end, (len(rates), end)
    assert all(rate <= reference * (1 + 1e-5) for rate, reference in zip(rates, undecayed, strict=True))
    # The plan is final from the step before the end at the latest (the end is only set at an earlier step):
    # the last update's rate is the schedule's divided by the decay's length, and the rate is zero at the end.
    assert rates[end - 2] == pytest.approx(undecayed[end - 2] / (end - decay_start), rel=1e-4), (plan, rates[-5:])
    assert rates[end - 1] == 0.0 and undecayed[end - 1] > 0.01 * max(undecayed), rates[-5:]

    # Run again, with a limit it does not reach and 150 steps more: a new segment after the planned end, re-warmed,
    # planned for its own limit, first predicted after 100 timed steps.
    rates_set.clear()
    again = train(model, data, config.replace(train_steps=end + 150, time_limit_minutes=10))
    second = read_plan(tmp_path / "train_config.json")
    batches = json.loads((tmp_path / "data_report.json").read_text())["num_batches"]
    assert (second.segment_start, second.rewarm_steps) == (plan.end_step, 5)
    assert again.start_step == plan.end_step and again.step > plan.end_step
    assert json.loads((tmp_path / "train_config.json").read_text())["time_limit_minutes"] == 10
    # Chosen once, mid-run (the training function traced again), for the end's epochs: below 1,000, so 0.3.
    assert again.status == "completed" and again.step == end + 150, second
    assert 100 <= second.predicted_at_step - end < 150, second
    assert (second.end_step, second.dropout, second.epochs) == (end + 150, 0.3, round((end + 150) / batches, 2))
    # The model trained with it: set on the model (after its build's 0.3 and 0), and every dropout layer drew
    # masks at every step after the choice and at none before it (their random states advanced by a multiple of
    # those steps; they do not advance at rate 0).
    assert rates_set == [0.0, 0.3], rates_set
    dropout_steps = end + 150 - second.predicted_at_step
    advanced = dropout_states(again.checkpoint) - dropout_states(result.checkpoint)
    assert np.all(advanced[:, 0] == 0) and np.all(advanced[:, 1] % dropout_steps == 0), (advanced, dropout_steps)
    assert np.count_nonzero(advanced[:, 1]) >= 3, advanced  # the embeddings' and a layer's residual dropouts
    # The first segment drew masks too (after its own choice), the warm-up step none (dropout 0 until a plan).
    assert np.any(dropout_states(result.checkpoint) != dropout_states(first.checkpoint))
    # config.json keeps the model's dropout, train_config.json the rule; the plan says what the run trained at.
    saved = json.loads((tmp_path / "config.json").read_text()), json.loads((tmp_path / "train_config.json").read_text())
    assert (saved[0]["dropout"], saved[1]["dropout_by_epochs"]) == (0.0, "0:0.3,1000:0.1")


def test_a_run_with_late_dropout_draws_no_masks_before_its_step_and_every_step_after(tmp_path, small_corpus):
    # A plan to train_steps (no clock): 20 steps, dropout 0.3 after step 10, checkpoints every 5 steps.
    model, data, training = tiny_model_and_data(
        small_corpus, dropout=0.3, initial_dropout=0.0, initial_dropout_fraction=0.5
    )
    config = TrainConfig(
        model_dir=str(tmp_path), train_steps=20, checkpoint_every=5, keep_checkpoints=10, budget_schedule="on",
        validation_batches=1, seed=1, **training,
    )  # fmt: skip
    result = train(model, data, config)
    plan = read_plan(tmp_path / "train_config.json")
    assert (result.step, plan.dropout, plan.dropout_from_step) == (20, 0.3, 10), plan
    states = {step: dropout_states(str(tmp_path / "checkpoints" / f"ckpt-{step}")) for step in (5, 10, 15, 20)}
    assert np.array_equal(states[5], states[10])  # steps 6-10 at dropout 0: no masks drawn
    advanced = states[20] - states[10]
    assert np.count_nonzero(advanced[:, 1]) >= 3 and np.all(advanced[:, 1] % 10 == 0), advanced
    assert np.array_equal(advanced, 2 * (states[15] - states[10]))  # 5 steps of the 10: the same masks a step
