"""The one trainer (issue 20): what it keeps, when it stops, its records and its checkpoints, on
scripted metrics so that each rule is checked exactly; and the recipe registry and run configs."""

import json

import pytest
import torch
from click.testing import CliRunner
from conftest import toy_cache

from seqdistill.cache_schema import CacheReader
from seqdistill.students import engine
from seqdistill.students.config import RunConfig, make_config
from seqdistill.students.engine import ListBatches, Plan, Stage
from seqdistill.students.recipes import recipes


@pytest.fixture(scope="module")
def cache(tiny_encoder, tmp_path_factory):
    return toy_cache(tiny_encoder, tmp_path_factory.mktemp("engine"), k=2, shard_size=16)


class _Batch:
    def __init__(self, x):
        self.x, self.origin = x, None


def _toy_plan(model, metric_values, snapshots=None, **stage):
    """A one-stage plan over 4 batches an epoch whose metric follows ``metric_values``."""
    values = iter(metric_values)
    data = torch.randn(8, 3, generator=torch.Generator().manual_seed(0))

    def evaluate():
        if snapshots is not None:
            snapshots.append({k: v.clone() for k, v in model.state_dict().items()})
        return {"m": next(values)}

    def plan(ctx):
        s = Stage(
            name="toy",
            batches=ListBatches(lambda epoch: list(range(8)), lambda idx: _Batch(data[idx]), 2),
            loss=lambda b: {"sq": model(b.x).pow(2).mean()},
            params=lambda: list(model.parameters()),
            optimizer=lambda ps: torch.optim.SGD(ps, lr=0.1),
            evaluate=evaluate,
            metric="m",
            **stage,
        )
        return Plan(model, None, [s])

    return plan


@pytest.fixture
def saves(monkeypatch):
    """The epochs at which the engine saved the student."""
    saved = []
    monkeypatch.setattr(engine, "save_student", lambda model, tok, out: saved.append(len(saved)))
    return saved


def test_save_stage_keeps_the_best_and_stops_after_patience(cache, tmp_path, saves):
    """Moved from the per-recipe epoch records: a new best saves, patience epochs without one stop,
    each epoch is one line of metrics.jsonl, the log marks the saved epochs."""
    lines = []
    model = torch.nn.Linear(3, 1)
    summary = engine.train(
        "toy",
        _toy_plan(model, [0.5, 0.7, 0.6, 0.65, 0.9], patience=2),
        CacheReader(cache),
        tmp_path,
        RunConfig(device="cpu"),
        log=lines.append,
    )
    assert [h["epoch"] for h in summary["history"]] == [1, 2, 3, 4]  # epochs 3 and 4 without a gain past epoch 2's 0.7
    assert len(saves) == 2 and (summary["best_epoch"], summary["best_m"]) == (2, 0.7)
    assert [json.loads(x)["epoch"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3, 4]
    epoch_lines = [x for x in lines if x.startswith("toy epoch")]
    assert "(best, saved)" in epoch_lines[1] and "(best, saved)" not in epoch_lines[2]
    assert summary["steps"] == 16 and summary["finished"]


def test_max_steps_cuts_the_run_and_the_same_command_goes_on(cache, tmp_path, saves):
    model = torch.nn.Linear(3, 1)
    capped = engine.train(
        "toy",
        _toy_plan(model, [0.1, 0.2, 0.3], patience=9, epochs=2),
        CacheReader(cache),
        tmp_path,
        RunConfig(device="cpu", max_steps=6),
        log=lambda *a: None,
    )
    assert capped["steps"] == 6 and not capped["finished"] and capped["history"][-1]["capped"]
    state = json.loads((tmp_path / "checkpoint" / "state.json").read_text())["state"]["position"]
    assert (state["epoch"], state["step"], state["consumed"]) == (1, 6, {"0": 2})
    more = engine.train(
        "toy",
        _toy_plan(model, [0.3], patience=9, epochs=2),
        CacheReader(cache),
        tmp_path,
        RunConfig(device="cpu"),
        log=lambda *a: None,
    )
    assert more["steps"] == 8 and more["finished"]
    again = engine.train(
        "toy", _toy_plan(model, []), CacheReader(cache), tmp_path, RunConfig(device="cpu"), log=lambda *a: None
    )
    assert again == json.loads((tmp_path / "training.json").read_text())  # finished: nothing trained again


def test_restore_stage_ends_with_the_weights_of_its_best_epoch(cache, tmp_path, saves):
    """Moved from XtremeDistil's run_step: the starting weights are epoch 0, the best epoch's
    weights are restored at the end, and a stage that only makes things worse is undone."""
    model = torch.nn.Linear(3, 1)
    snapshots = []  # before training, then after each epoch
    summary = engine.train(
        "toy",
        _toy_plan(model, [0.7, 0.5, 0.9, 0.8, 0.1], snapshots, mode="min", epochs=4, patience=2, keep="restore"),
        CacheReader(cache),
        tmp_path / "a",
        RunConfig(device="cpu"),
        log=lambda *a: None,
    )
    record = summary["stages"][0]
    assert (record["epochs"], record["best_epoch"], record["m"]) == (3, 1, 0.5)  # epochs 2, 3 no better: stop
    assert not torch.equal(snapshots[1]["weight"], snapshots[3]["weight"])
    for k, v in model.state_dict().items():
        assert torch.equal(v, snapshots[1][k]), k  # epoch 1's weights, not the last epoch's
    assert len(saves) == 1  # the last stage restores: the student is saved at the end
    snapshots.clear()
    summary = engine.train(
        "toy",
        _toy_plan(model, [0.1, 0.5, 0.6], snapshots, mode="min", epochs=4, patience=2, keep="restore"),
        CacheReader(cache),
        tmp_path / "b",
        RunConfig(device="cpu"),
        log=lambda *a: None,
    )
    record = summary["stages"][0]
    assert (record["epochs"], record["best_epoch"], record["m"]) == (2, 0, 0.1)
    for k, v in model.state_dict().items():
        assert torch.equal(v, snapshots[0][k]), k


def test_a_checkpoint_older_than_an_option_resumes_at_its_default_only(tmp_path):
    """A checkpoint written before a setting existed (its saved config lacks the key) resumes when
    the run leaves that setting at its default, and is refused by name when it does not."""
    from seqdistill.checkpoint import config_defaults
    from seqdistill.students.recipes.xtremedistil import XtremeDistilConfig
    from seqdistill.teachers.finetune import FinetuneConfig
    from seqdistill.training import check_identity, settings

    old = {"recipe": "xtremedistil", "cache": "c", "config": settings(XtremeDistilConfig())}
    del old["config"]["select"]  # the option came later
    defaults = config_defaults(XtremeDistilConfig())
    assert defaults["select"] == "val-loss" and defaults["losses"] == ["ce", "ll"]
    now = {**old, "config": settings(XtremeDistilConfig())}
    check_identity(tmp_path, old, now, defaults)  # at the default: the same run
    now = {**old, "config": settings(XtremeDistilConfig(select="dev-f1"))}
    with pytest.raises(ValueError, match=r"another run \(select was None, now 'dev-f1'\)"):
        check_identity(tmp_path, old, now, defaults)
    now = {**old, "config": settings(XtremeDistilConfig(lr=0.5))}
    with pytest.raises(ValueError, match=r"another run \(lr was 0.001, now 0.5\)"):
        check_identity(tmp_path, old, now, defaults)  # a setting the checkpoint has still counts
    # the same rule for finetune-teacher's checkpoints (the same trainer)
    saved = {"encoder": "e", "config": settings(FinetuneConfig())}
    del saved["config"]["pooling"]
    defaults = config_defaults(FinetuneConfig())
    check_identity(tmp_path, saved, {"encoder": "e", "config": settings(FinetuneConfig())}, defaults)
    with pytest.raises(ValueError, match=r"another run \(pooling was None, now 'mean'\)"):
        check_identity(tmp_path, saved, {"encoder": "e", "config": settings(FinetuneConfig(pooling="mean"))}, defaults)


def test_another_runs_checkpoint_is_refused_by_name_and_restart_discards_it(cache, tmp_path, saves):
    model = torch.nn.Linear(3, 1)
    engine.train(
        "toy",
        _toy_plan(model, [0.1, 0.2]),
        CacheReader(cache),
        tmp_path,
        RunConfig(device="cpu", max_steps=2),
        log=lambda *a: None,
    )
    with pytest.raises(ValueError, match=r"checkpoint of another run \(seed was 13, now 14\).*--restart"):
        engine.train(
            "toy",
            _toy_plan(model, [0.1]),
            CacheReader(cache),
            tmp_path,
            RunConfig(device="cpu", seed=14),
            log=lambda *a: None,
        )
    fresh = engine.train(
        "toy",
        _toy_plan(model, [0.1] * 10, epochs=1),
        CacheReader(cache),
        tmp_path,
        RunConfig(device="cpu", seed=14, resume=False),
        log=lambda *a: None,
    )
    assert fresh["steps"] == 4 and fresh["finished"]


def test_tensorboard_scalars_mirror_metrics_jsonl(cache, tmp_path, saves):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    model = torch.nn.Linear(3, 1)
    engine.train(
        "toy",
        _toy_plan(model, [0.5, 0.7], epochs=2),
        CacheReader(cache),
        tmp_path,
        RunConfig(device="cpu", report_to=("tensorboard",)),
        log=lambda *a: None,
    )
    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    for key in ("m", "loss", "loss_sq", "lr"):
        got = [(e.step, e.value) for e in events.Scalars(key)]
        assert got == [(r["step"], pytest.approx(r[key], rel=1e-6)) for r in records], key


def test_six_recipes_registered_each_with_its_own_options():
    known = recipes()
    assert set(known) == {"mgkd", "xtremedistil", "sentscore", "mt", "rnn", "token-kd"}
    mgkd, rnn = known["mgkd"].config, known["rnn"].config
    assert make_config(mgkd, {"k": 3, "losses": "hard,fuzzy"}, "x").losses == ("hard", "fuzzy")
    with pytest.raises(ValueError, match=r"run.toml: 'k' is not an option of this recipe"):
        make_config(rnn, {"k": 3}, "run.toml")
    with pytest.raises(ValueError, match=r"x: losses: 'bogus' is not one of hard, seq-ce"):
        make_config(mgkd, {"losses": "hard,bogus"}, "x")
    with pytest.raises(ValueError, match=r"x: hidden-size: a whole number, not 2.5"):
        make_config(mgkd, {"hidden-size": 2.5}, "x")


def test_cli_refuses_another_recipes_option_and_reproduces_a_run_from_its_config(cache, tmp_path):
    from seqdistill.cli.train import main as train_cli

    r = CliRunner().invoke(train_cli, ["rnn", "--cache", cache, "--out", str(tmp_path / "x"), "--k", "3"])
    assert r.exit_code == 2 and "--k is an option of the mgkd recipe, not of rnn" in r.output
    r = CliRunner().invoke(train_cli, ["sentscore", "--cache", cache, "--out", str(tmp_path / "x"), "--schedule", "d4"])
    assert r.exit_code == 2 and "--schedule is an option of the xtremedistil recipe" in r.output
    args = [
        "--cache",
        cache,
        "--epochs",
        "2",
        "--embedding",
        "random",
        "--embedding-dim",
        "8",
        "--hidden-size",
        "8",
        "--device",
        "cpu",
        "--losses",
        "hard,seq-ce",
        "--k",
        "2",
    ]
    r = CliRunner().invoke(train_cli, ["mgkd", "--out", str(tmp_path / "a"), *args])
    assert r.exit_code == 0, r.output
    text = (tmp_path / "a" / "config.toml").read_text()
    assert 'recipe = "mgkd"' in text and 'losses = [\n    "hard",\n    "seq-ce",\n]' in text and "k = 2" in text
    # the saved config runs the same training again (into another directory)
    r = CliRunner().invoke(train_cli, ["--config", str(tmp_path / "a" / "config.toml"), "--out", str(tmp_path / "b")])
    assert r.exit_code == 0, r.output
    a, b = (json.loads((tmp_path / d / "training.json").read_text()) for d in "ab")
    assert [h["dev_f1"] for h in a["history"]] == [h["dev_f1"] for h in b["history"]]
    assert [h["loss"] for h in a["history"]] == [h["loss"] for h in b["history"]]
    # --recipe NAME is an alias; a wrong value in a config file is named with its file
    (tmp_path / "bad.toml").write_text('recipe = "mgkd"\nk = "many"\n')
    r = CliRunner().invoke(
        train_cli, ["--config", str(tmp_path / "bad.toml"), "--cache", cache, "--out", str(tmp_path / "c")]
    )
    assert r.exit_code == 2 and "bad.toml: k: invalid literal" in r.output


def test_svd_width_beyond_the_teachers_embeddings_is_refused_before_training(cache, tmp_path):
    from seqdistill.cli.train import main as train_cli

    # the tiny teacher's embeddings are 32 wide: xtremedistil's default E = 300 cannot be an SVD of them
    r = CliRunner().invoke(
        train_cli,
        [
            "--recipe",
            "xtremedistil",
            "--schedule",
            "d1",
            "--cache",
            cache,
            "--out",
            str(tmp_path / "s"),
            "--device",
            "cpu",
        ],
    )
    assert r.exit_code == 1
    assert "--embedding-dim 300: the teacher's embedding matrix is" in r.output
    assert "(88, 32) (as the cache kept it" in r.output  # every row of the tiny teacher's matrix
    assert "an SVD reduction can keep 1 to 32 dimensions" in r.output
    assert not (tmp_path / "s" / "metrics.jsonl").exists()


def test_prefetch_yields_in_order_raises_in_the_consumer_and_leaves_no_thread_behind():
    """students/data.py Prefetch: every item in order; a reader's error is raised in the consumer;
    a consumer that stops early (or fails) waits for the reader thread, so none outlives the loop
    (a later fork must not inherit a lock a live reader held)."""
    import threading

    from seqdistill.students.data import Prefetch

    def readers():
        return [t for t in threading.enumerate() if t.name == "seqdistill-prefetch"]

    assert list(Prefetch(range(50), depth=2)) == list(range(50))
    it = iter(Prefetch(range(1000), depth=2))
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    it.close()  # the queue is full, the reader is waiting to put
    assert readers() == []

    def failing():
        yield 1
        raise OSError("shard 3 is unreadable")

    with pytest.raises(OSError, match="shard 3"):
        list(Prefetch(failing(), depth=1))
    assert readers() == []


def test_bf16_autocasts_the_training_step_alone_and_keeps_the_weights_fp32(cache, tmp_path, saves):
    """``--precision bf16``: the stage's loss (forward pass and loss parts) runs under bf16 autocast and
    its parts come back fp32; the evaluation runs without it; the weights and the optimiser stay fp32.
    At fp32 nothing is autocast, and the two runs' weights differ by bf16 rounding only."""
    seen = {}

    def run(precision):
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 1)
        plan = _toy_plan(model, [0.5, 0.6], patience=9, epochs=2)

        def traced(ctx):
            p = plan(ctx)
            loss, evaluate = p.stages[0].loss, p.stages[0].evaluate

            def loss_traced(b):
                out = model(b.x)
                seen.setdefault(precision, {})["step"] = (torch.is_autocast_enabled("cpu"), out.dtype)
                return {"sq": loss(b)["sq"]}

            def evaluate_traced():
                seen[precision]["eval"] = torch.is_autocast_enabled("cpu")
                return evaluate()

            p.stages[0].loss, p.stages[0].evaluate = loss_traced, evaluate_traced
            return p

        summary = engine.train(
            "toy",
            traced,
            CacheReader(cache),
            tmp_path / precision,
            RunConfig(device="cpu", precision=precision),
            log=lambda *a: None,
        )
        assert all(p.dtype == torch.float32 for p in model.parameters())
        assert isinstance(summary["history"][0]["loss_sq"], float)
        return {k: v.clone() for k, v in model.state_dict().items()}

    bf16, fp32 = run("bf16"), run("fp32")
    assert seen["bf16"] == {"step": (True, torch.bfloat16), "eval": False}
    assert seen["fp32"] == {"step": (False, torch.float32), "eval": False}
    assert json.loads((tmp_path / "bf16" / "training.json").read_text())["config"]["precision"] == "bf16"
    for k in fp32:
        assert not torch.equal(bf16[k], fp32[k]), k  # bf16's products round: the runs differ ...
        torch.testing.assert_close(bf16[k], fp32[k], rtol=0.05, atol=0.02)  # ... by rounding only
