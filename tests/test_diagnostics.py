"""Each diagnostic equals a direct computation; a planted NaN stops training, naming the layer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import lightning as L
import pytest
import torch
from typer.testing import CliRunner

from normzoo.diagnostics.callbacks import DivergenceError
from normzoo.diagnostics.probes import gradient_norms, probe
from normzoo.models import assemble
from normzoo.nn.padding import padding_mask_context
from normzoo.recipe import from_dict
from normzoo.run import training as train

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NORMZOO_CACHE", str(tmp_path / "cache"))
        yield


def real_tokens(x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
    return x[~pad]


# A pre-norm, a post-norm and a two-stream scheme: the three ways a stream is read.
@pytest.mark.parametrize("residual", ["pre", "post", "resi_dual"])
def test_forward_diagnostics_equal_direct_computations(residual):
    torch.manual_seed(0)
    model = assemble({"family": "encoder_decoder", "vocab_size": 40, "d_model": 16, "heads": 2,
                      "ffn_dim": 32, "encoder_layers": 2, "decoder_layers": 2, "dropout": 0.0,
                      "residual": residual}).eval()
    src = torch.randint(5, 40, (3, 7))
    src[0, 5:] = 0  # padding must stay out of every mean
    tgt = torch.randint(5, 40, (3, 4))
    with probe(model) as found:
        model(src, tgt)

    # Recompute the encoder by hand, layer by layer, from the model's own modules.
    pad = src.eq(0)
    stack = model.encoder
    with padding_mask_context(pad):
        x = stack.ends.begin(stack.embedding_norm(model.encoder_embeddings(src)))
        for i, layer in enumerate(stack.layers):
            name = f"encoder.layers.{i}"
            stream_in = x[0] if isinstance(x, tuple) else x
            attn_out = layer.self_attn(
                layer.self_attn_residual.norm(stream_in) if residual == "pre" else stream_in,
                key_padding_mask=pad)
            ratio = (real_tokens(attn_out, pad).norm(dim=-1).mean()
                     / real_tokens(stream_in, pad).norm(dim=-1).mean())
            assert found.branch_ratio[f"{name}.self_attn"] == pytest.approx(ratio.item(),
                                                                            rel=1e-5)
            branch = real_tokens(attn_out, pad).norm(dim=-1).mean()  # ||f(x)|| itself
            assert found.branch_norm[f"{name}.self_attn"] == pytest.approx(branch.item(),
                                                                           rel=1e-5)
            if residual == "pre":
                rms = real_tokens(stream_in, pad).pow(2).mean().sqrt()
                key = f"encoder.layers.{i}.self_attn_residual.norm"
                assert found.norm_input[key] == pytest.approx(rms.item(), rel=1e-5)
            x = layer(x, pad)
            stream_out = x[0] if isinstance(x, tuple) else x
            norm = real_tokens(stream_out, pad).norm(dim=-1).mean()
            assert found.stream_norm[name] == pytest.approx(norm.item(), rel=1e-5)
            cosine = torch.nn.functional.cosine_similarity(
                real_tokens(stream_in, pad), real_tokens(stream_out, pad), dim=-1).mean()
            assert found.layer_cosine[name] == pytest.approx(cosine.item(), rel=1e-5, abs=1e-6)
    # Every sublayer of both stacks is measured.
    assert len(found.branch_ratio) == len(found.branch_norm) == 2 * 2 + 2 * 3
    assert len(found.stream_norm) == 4


def test_gradient_norms_equal_direct_computations():
    torch.manual_seed(1)
    model = assemble({"family": "decoder", "vocab_size": 30, "d_model": 16, "heads": 2,
                      "ffn_dim": 32, "decoder_layers": 3, "dropout": 0.0})
    tokens = torch.randint(5, 30, (2, 6))
    model(tokens).logsumexp(-1).sum().backward()
    norms = gradient_norms(model)
    layer = model.decoder.layers[1]
    direct = torch.cat([p.grad.flatten() for p in layer.parameters()]).norm()
    assert norms["decoder.layers.1"] == pytest.approx(direct.item(), rel=1e-5)
    ffn_params = [*layer.ffn.parameters(), *layer.ffn_residual.parameters()]
    direct_ffn = torch.cat([p.grad.flatten() for p in ffn_params]).norm()
    assert norms["decoder.layers.1.ffn"] == pytest.approx(direct_ffn.item(), rel=1e-5)
    assert set(norms) == {f"decoder.layers.{i}{s}" for i in range(3)
                          for s in ("", ".self_attn", ".ffn")}


# -- divergence -----------------------------------------------------------------------------------


def tiny_recipe(run_dir: Path, **diagnostics) -> dict:
    return {
        "task": "translation", "seed": 2, "run": {"dir": str(run_dir)},
        "model": {"d_model": 32, "heads": 2, "ffn_dim": 64, "encoder_layers": 3,
                  "decoder_layers": 1, "dropout": 0.0, "max_positions": 128},
        "data": {"train_limit": 300, "valid_limit": 10, "max_tokens": 512, "max_len": 64,
                 "tokenizer": {"vocab_size": 200, "min_frequency": 1}},
        "optim": {"lr": 1e-3, "warmup_steps": 2},
        "trainer": {"max_steps": 8, "val_every_steps": 2, "progress_bar": False,
                    "accelerator": "cpu", "keep_checkpoints": 0},
        "diagnostics": diagnostics,
    }


class PlantNaN(L.Callback):
    """Puts a NaN into encoder layer 1's first feed-forward matrix before step 3."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == 3:
            with torch.no_grad():
                pl_module.model.encoder.layers[1].ffn.ffn_in.weight[0, 0] = float("nan")


@pytest.fixture
def planted(monkeypatch):
    original = train.build_trainer

    def with_nan(recipe, run_dir, **extra):
        trainer = original(recipe, run_dir, **extra)
        trainer.callbacks.append(PlantNaN())
        return trainer

    monkeypatch.setattr(train, "build_trainer", with_nan)


def test_planted_nan_stops_training_naming_the_layer_and_keeps_the_good_checkpoint(
    tmp_path, planted
):
    recipe = from_dict(tiny_recipe(tmp_path / "run"))
    with pytest.raises(DivergenceError) as caught:
        train.run(recipe, "nan.yaml")
    message = str(caught.value)
    assert "step 3" in message
    assert "encoder.layers.1.ffn.ffn_in" in message
    last = torch.load(tmp_path / "run/checkpoints/last.ckpt", weights_only=True)
    assert last["global_step"] == 2  # the checkpoint before the NaN, not a broken one
    assert all(torch.isfinite(v).all() for v in last["state_dict"].values())


def test_planted_nan_exits_with_the_documented_code(tmp_path, planted):
    from normzoo.cli import app

    recipe = tmp_path / "nan.yaml"
    import yaml

    recipe.write_text(yaml.safe_dump(tiny_recipe(tmp_path / "run")))
    result = CliRunner().invoke(app, ["train", str(recipe)])
    assert result.exit_code == DivergenceError.exit_code == 3, result.output
    assert "diverged at step 3" in result.output and "Traceback" not in result.output


def test_exploding_loss_above_max_loss_stops(tmp_path):
    recipe = from_dict(tiny_recipe(tmp_path / "run", max_loss=0.5))
    with pytest.raises(DivergenceError, match="step 0: loss"):
        train.run(recipe, "explode.yaml")


def test_diagnostics_are_logged_every_k_steps(tmp_path):
    import csv

    recipe = from_dict(tiny_recipe(tmp_path / "run", every_steps=3))
    train.run(recipe, "diag.yaml")
    with open(tmp_path / "run/logs/csv/metrics.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("diag/stream_norm/encoder.layers.2")]
    assert [int(r["step"]) for r in rows] == [0, 3, 6]
    for row in rows:
        for key in ("diag/grad_norm/encoder.layers.0", "diag/branch_ratio/decoder.layers.0.ffn",
                    "diag/layer_cosine/encoder.layers.1",
                    "diag/norm_input/encoder.ends.final_norm"):
            assert float(row[key]) > 0, key


def test_diagnose_command_compares_variants_and_writes_plots(tmp_path):
    import yaml

    from normzoo.cli import app

    recipe = tiny_recipe(tmp_path / "unused")
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(recipe))
    out = tmp_path / "diag"
    result = CliRunner().invoke(app, ["diagnose", str(path), "model.encoder_layers=4",
                                      "--vary", "model.residual=post,pre", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "### residual=post" in result.output and "### residual=pre" in result.output
    assert "| encoder.layers.3 |" in result.output
    assert sorted(p.name for p in out.iterdir()) == [
        "branch_ratio_vs_depth.png", "diagnostics.md", "grad_norm_vs_depth.png",
        "layer_cosine_vs_depth.png",
        "stream_norm_vs_depth.png"]
    assert all(p.stat().st_size > 5000 for p in out.glob("*.png"))


def test_sweep_runs_the_grid_records_divergence_and_resumes(tmp_path, monkeypatch):
    import csv

    import yaml

    from normzoo.sweep.runner import sweep

    recipe = tiny_recipe(tmp_path / "unused")
    recipe["trainer"].update(max_steps=4, val_every_steps=2, log_every_steps=1)
    recipe["eval"] = {"valid_bleu": False}
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(recipe))
    out = tmp_path / "sweep"
    grid = ["model.residual=post,pre", "diagnostics.max_loss=0.5,1000"]
    rows = sweep(path, grid, [], out, steps=4)
    assert len(rows) == 4
    by_cell = {(r["model.residual"], r["diagnostics.max_loss"]): r for r in rows}
    for residual in ("post", "pre"):
        assert by_cell[(residual, "0.5")]["status"] == "diverged"
        assert by_cell[(residual, "0.5")]["diverged_at_step"] == 0
        assert by_cell[(residual, "1000")]["status"] == "ok"
        assert by_cell[(residual, "1000")]["steps"] == 4
        assert by_cell[(residual, "1000")]["final_train_loss"] > 0
    with open(out / "results.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == 4
    assert {"results.md", "loss_curves.png", "stability_map.png"} <= {p.name for p in
                                                                     out.iterdir()}
    # Started again, the finished cells are not trained a second time.
    monkeypatch.setattr(train, "run", lambda *a, **k: pytest.fail("a finished cell re-ran"))
    again = sweep(path, grid, [], out, steps=4)
    assert again == rows


def _tiny_sweep_recipe(tmp_path: Path) -> Path:
    import yaml

    recipe = tiny_recipe(tmp_path / "unused")
    recipe["trainer"].update(max_steps=2, val_every_steps=2, log_every_steps=1)
    recipe["eval"] = {"valid_bleu": False}
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def test_a_failed_cell_is_recorded_the_others_run_and_a_rerun_retries_it(tmp_path, monkeypatch):
    """A cell that fails (here: the machine runs out of memory) does not stop the sweep: the
    other cells run, results.md and the plots show every cell with the failure and its reason,
    the sweep ends with exit code 1 naming the failed cell, and running it again retries only
    that cell."""
    from normzoo.errors import RuntimeFailure
    from normzoo.sweep.runner import SweepFailed, sweep

    path, out, real_run = _tiny_sweep_recipe(tmp_path), tmp_path / "sweep", train.run

    def run_or_fail(resolved, *args, **kwargs):
        if resolved.seed == 2:
            raise RuntimeFailure("out of memory: lower data.max_tokens")
        return real_run(resolved, *args, **kwargs)

    monkeypatch.setattr(train, "run", run_or_fail)
    with pytest.raises(SweepFailed) as caught:
        sweep(path, ["seed=1,2,3"], [], out, steps=2)
    assert caught.value.exit_code == 1
    assert "1 of 3 sweep cells failed" in str(caught.value)
    assert "seed-2: out of memory: lower data.max_tokens" in str(caught.value)
    results = (out / "results.md").read_text()
    assert results.count("| ok |") == 2
    assert "| 2 | failed |  |  | failed: out of memory: lower data.max_tokens |" in results
    assert "| 1, 3 | 0 | 1 |" in results  # over seeds: the two that ran, one failed
    assert {"loss_curves.png", "stability_map.png"} <= {p.name for p in out.iterdir()}
    assert not (out / "seed-2" / "cell.json").exists()
    # Run again: only the failed cell trains, and now it finishes.
    trained = []
    monkeypatch.setattr(train, "run", lambda resolved, *a, **k: trained.append(resolved.seed)
                        or real_run(resolved, *a, **k))
    rows = sweep(path, ["seed=1,2,3"], [], out, steps=2)
    assert trained == [2]
    assert [row["status"] for row in rows] == ["ok", "ok", "ok"]
    assert not (out / "seed-2" / "failed.json").exists()


def test_cells_running_side_by_side_fail_alike(tmp_path):
    """With --jobs 2 (each cell a submitit job in a process of its own), a failing cell is
    recorded the same way, and a user error keeps its exit code (2)."""
    from normzoo.sweep.runner import SweepFailed, sweep

    missing = tmp_path / "no-such-data"
    with pytest.raises(SweepFailed) as caught:
        sweep(_tiny_sweep_recipe(tmp_path), ["data.source=builtin,files"],
              [f"data.dir={missing}"], tmp_path / "sweep", steps=2, jobs=2)
    assert caught.value.exit_code == 2
    assert "1 of 2 sweep cells failed" in str(caught.value)
    # A training run checks its inputs before it reads any (normzoo.run.inputs.for_training).
    assert "source-files" in str(caught.value)
    assert f"the folder {missing} does not exist" in str(caught.value)
    results = (tmp_path / "sweep" / "results.md").read_text()
    assert "| builtin | ok |" in results and "| files | failed |" in results


def test_sweep_grid_axes_and_tied_keys():
    from normzoo.errors import ConfigError
    from normzoo.sweep.runner import cell_name, cell_overrides, cells, parse_grid

    grid = parse_grid(["model.residual=post,pre",
                       "model.encoder_layers,model.decoder_layers=6,18"])
    all_cells = cells(grid)
    assert len(all_cells) == 4
    cell = all_cells[-1]
    assert cell_overrides(cell) == ["model.residual=pre", "model.encoder_layers=18",
                                    "model.decoder_layers=18"]
    assert cell_name(cell) == "residual-pre_encoder_layers-18"
    for bad in ("model.residual", "model.residual=", "seed=,", " =1,2", "=post"):
        with pytest.raises(ConfigError, match="must look like KEY=V1,V2"):
            parse_grid([bad])


def test_a_sweep_grid_that_would_train_one_cell_for_two_is_refused():
    """``seed=1,1`` or ``admin,{name: admin}`` name one folder twice: the second would be skipped
    as finished (or collide with the first under --jobs), so fewer cells than asked for would
    train without a word. Refused, with every problem at once."""
    from normzoo.errors import ConfigError
    from normzoo.sweep.runner import parse_grid

    with pytest.raises(ConfigError) as refused:
        parse_grid(["seed=1,1,2", "model.residual=admin,{name: admin}", "optim.lr=1e-3",
                    "optim.lr,trainer.max_steps=1e-3,2e-3"])
    said = str(refused.value)
    assert "seed=1,1,2: 1 given more than once" in said
    assert "admin given more than once" in said
    assert "optim.lr: named by --set more than once" in said


@pytest.mark.parametrize(("setting", "out", "says"), [
    ("seed=1,1", "sweep", "1 given more than once"),
    # an axis without values has no cells: the sweep trained nothing and its plots raised
    ("seed=,", "sweep", "must look like KEY=V1,V2"),
    # was "could not write ...: Not a directory", exit 1
    ("seed=1", "a-file/sweep", "a-file, a file, not a folder"),
])
def test_a_bad_sweep_is_refused_before_anything_is_written(tmp_path, setting, out, says):
    from normzoo.cli import app

    (tmp_path / "a-file").write_text("keep me", encoding="utf-8")
    quickstart = Path(__file__).parents[1] / "recipes" / "quickstart.yaml"
    result = CliRunner().invoke(app, ["sweep", str(quickstart), "--set", setting,
                                      "--out", str(tmp_path / out)])
    assert result.exit_code == 2, result.output
    assert says in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_sweep_values_may_be_mappings():
    from normzoo.sweep.runner import cell_name, cell_overrides, cells, parse_grid

    grid = parse_grid(["model.residual=deepnorm,{name: admin, init: profiled},subln",
                       "trainer.loggers=[csv],[csv, tensorboard]"])
    assert grid[0][1] == ["deepnorm", "{name: admin, init: profiled}", "subln"]
    assert grid[1][1] == ["[csv]", "[csv, tensorboard]"]
    cell = cells(grid)[2]
    assert cell_overrides(cell) == ["model.residual={name: admin, init: profiled}",
                                    "trainer.loggers=[csv]"]
    assert cell_name(cell) == "residual-admin-init-profiled_loggers-_csv_"


def test_sweep_diagnose_measures_each_cell_at_init_and_at_the_end(tmp_path):
    import csv

    import yaml

    from normzoo.sweep.runner import sweep

    recipe = tiny_recipe(tmp_path / "unused")
    recipe["trainer"].update(max_steps=2, val_every_steps=2)
    recipe["eval"] = {"valid_bleu": False}
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(recipe))
    grid = ["model.residual=post,{name: admin, init: profiled}"]
    rows = sweep(path, grid, [], tmp_path / "sweep", steps=2, diagnose=True)
    assert [r["status"] for r in rows] == ["ok", "ok"]
    for row in rows:
        with open(tmp_path / "sweep" / row["cell"] / "diagnose.csv", newline="") as f:
            table = list(csv.DictReader(f))
        layers = recipe["model"]["encoder_layers"] + recipe["model"]["decoder_layers"]
        assert [r["when"] for r in table] == ["init"] * layers + ["final"] * layers
        assert all(float(r["grad_norm"]) > 0 and float(r["stream_norm"]) > 0 for r in table)
        # Training moved the weights: the end differs from the start.
        assert table[0]["grad_norm"] != table[layers]["grad_norm"]
        assert (tmp_path / "sweep" / row["cell"] / "diagnose.md").is_file()


def test_sweep_results_list_every_finished_cell_whatever_order_they_ran_in(tmp_path,
                                                                           monkeypatch):
    """A sweep started again with its values in another order (to run some cells first) still
    writes every finished cell of the grid, in the grid's order, from the first cell it ends."""
    import json

    import yaml

    from normzoo.sweep import runner as sweeps

    recipe = tiny_recipe(tmp_path / "unused")
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(recipe))
    out = tmp_path / "sweep"
    def fake_cell(recipe_path, overrides, cell, out, steps, diagnose=False):
        name = sweeps.cell_name(cell)
        row = {"cell": name, **cell, "status": "ok", "steps": 4}
        (out / name).mkdir(parents=True, exist_ok=True)
        (out / name / "cell.json").write_text(json.dumps(row))
        return row

    monkeypatch.setattr(sweeps, "run_cell", fake_cell)
    monkeypatch.setattr(sweeps, "plot", lambda *a: None)
    # A first sweep ran only the 18-layer cells.
    sweeps.sweep(path, ["model.residual=post,pre", "model.encoder_layers=18"], [], out, None)
    # The full grid, deep cells listed first: its results hold all four from the first write.
    seen = []
    monkeypatch.setattr(sweeps, "write_results",
                        lambda rows, keys, out: seen.append([r["cell"] for r in rows]))
    rows = sweeps.sweep(path, ["model.residual=post,pre", "model.encoder_layers=18,6"], [], out,
                        None)
    assert [r["cell"] for r in rows] == ["residual-post_encoder_layers-18",
                                         "residual-post_encoder_layers-6",
                                         "residual-pre_encoder_layers-18",
                                         "residual-pre_encoder_layers-6"]
    assert seen[0] == ["residual-post_encoder_layers-18", "residual-pre_encoder_layers-18"]
    assert seen[-1] == [r["cell"] for r in rows]


@pytest.mark.parametrize("residual", ["rezero", "layerscale", "deepnorm", "admin", "sandwich"])
def test_branch_ratio_compares_the_terms_as_the_scheme_sums_them(residual):
    """ReZero adds a·f(x), LayerScale diag(l)·f(x), Sandwich LN(f(x)); DeepNorm and Admin scale
    the stream (alpha·x, w⊙x). The ratio compares the terms as they are summed."""
    torch.manual_seed(2)
    model = assemble({"family": "encoder", "vocab_size": 40, "d_model": 16, "heads": 2,
                      "ffn_dim": 32, "encoder_layers": 2, "dropout": 0.0,
                      "residual": residual}).eval()
    if residual == "rezero":  # a = 0 at init: give one connection a value to measure
        model.encoder.layers[1].ffn_residual.a.data.fill_(0.25)
    src = torch.randint(5, 40, (2, 6))
    seen: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    layer = model.encoder.layers[1]
    layer.ffn_residual.register_forward_pre_hook(
        lambda m, args: seen.__setitem__("x", args[0]))
    layer.ffn.register_forward_hook(lambda m, args, out: seen.__setitem__("f", out))
    with probe(model) as found:
        model(src)
    x, f = seen["x"], seen["f"]
    res = layer.ffn_residual
    if residual == "rezero":
        stream_term, branch_term = x, 0.25 * f
    elif residual == "layerscale":
        stream_term, branch_term = x, res.scale * f
    elif residual == "deepnorm":
        stream_term, branch_term = res.alpha * x, f
    elif residual == "admin":
        stream_term, branch_term = res.omega * x, f
    else:
        stream_term, branch_term = x, res.norm_out(f)
    expected = branch_term.detach().norm(dim=-1).mean() / stream_term.detach().norm(dim=-1).mean()
    assert found.branch_ratio["encoder.layers.1.ffn"] == pytest.approx(expected.item(), rel=1e-5)
    assert found.branch_norm["encoder.layers.1.ffn"] == pytest.approx(
        branch_term.detach().norm(dim=-1).mean().item(), rel=1e-5)
    if residual == "rezero":  # every other connection still adds nothing
        assert found.branch_ratio["encoder.layers.0.ffn"] == 0.0
        assert found.branch_ratio["encoder.layers.1.self_attn"] == 0.0


def test_diagnose_prints_a_zero_branch_ratio_for_rezero_at_initialisation(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "NORMZOO_CACHE": str(tmp_path / "cache"),
           "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "normzoo", "diagnose",
                           "recipes/quickstart.yaml", "model.residual=rezero",
                           "data.train_limit=200", "--out", str(tmp_path / "diag")],
                          capture_output=True, text=True, env=env, timeout=300,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| encoder.layers")
            or line.startswith("| decoder.layers")]
    assert rows
    for row in rows:
        ratios = [c.strip() for c in row.strip("|").split("|")[4:] if c.strip()]
        assert ratios and all(r == "0.000" for r in ratios), row
    assert "UserWarning" not in done.stderr
