"""Resume: the run's own config from its checkpoint, only command-line keys on top, data fingerprint guard."""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf, open_dict

from ocr.checkpoints.resume import (
    Resume,
    ResumeRefusedError,
    find_checkpoint,
    resume_from_command_line,
    resume_run,
)
from ocr.machine.hardware import register_resolvers
from ocr.run.folder import read_run_id
from tests.helpers.paths import REPO_ROOT

RUN_CONFIG = {
    "seed": 42,
    "resume": None,
    "ckpt_path": None,
    "resume_allow_data_change": False,
    "resume_allow_other_run": False,
    "resume_allow_world_size_change": False,
    "paths": {"output_dir": "/old/place/run"},
    "model": {"decoder": {"channels": 128}},
    "optimizer": {"lr": 0.001},
    "trainer": {"max_steps": 200, "accelerator": "cpu"},
    "data": {"root": "/data/receipts", "batch_size": 8, "scale_range": [0.5, 3.0]},
    "callbacks": {"checkpoint": {"dirpath": "/old/place/run/checkpoints"}},
    "logger": {"csv": {"save_dir": "/old/place/run", "version": ""}},
}


def _resume(composed: OmegaConf, overrides: list[str]) -> Resume:
    """``resume_run`` with the folder's run identity, as the run claim passes it."""
    return resume_run(composed, overrides, read_run_id(composed.paths.output_dir))


def _save(run: Path, name: str, step: int, with_json: bool = True, run_id: str | None = None) -> Path:
    path = run / "checkpoints" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    config = json.loads(json.dumps(RUN_CONFIG))
    if run_id is not None:  # as the runner records it: in run.json and in the checkpoint's config
        config["run_id"] = run_id
        (run / "run.json").write_text(json.dumps({"run_id": run_id}))
    config["paths"]["output_dir"] = str(run)
    config["callbacks"]["checkpoint"]["dirpath"] = str(run / "checkpoints")
    config["logger"]["csv"]["save_dir"] = str(run)
    checkpoint = {"state_dict": {}, "ocr_config": config, "global_step": step, "epoch": step // 3}
    checkpoint["data_fingerprint"] = "aaaa1111"
    torch.save(checkpoint, path)
    if with_json:
        Path(f"{path}.json").write_text(json.dumps({"global_step": step, "data_fingerprint": "aaaa1111"}))
    return path


def _composed(run: Path, **changes: object) -> OmegaConf:
    """What Hydra composes for `runners/train.py resume=<run> ...`: today's defaults, not the run's."""
    composed = {
        **json.loads(json.dumps(RUN_CONFIG)),
        "resume": str(run),
        "paths": {"output_dir": str(run)},
        "trainer": {"max_steps": 400, "accelerator": "gpu"},
        "data": {"root": "/data/synthetic", "batch_size": 16, "scale_range": [0.5, 2.0]},
    }
    composed.update(changes)
    cfg = OmegaConf.create(composed)
    OmegaConf.set_struct(cfg, True)
    return cfg


def test_picks_the_latest_checkpoint_and_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _save(tmp_path, "best-hmean=0.9-epoch=01.ckpt", 6)
    _save(tmp_path, "last.ckpt", 9)
    _save(tmp_path, "best-hmean=0.8-epoch=02.ckpt", 12, with_json=False)  # killed before its JSON
    with caplog.at_level(logging.INFO, logger="ocr.checkpoints.resume"):
        assert find_checkpoint(tmp_path, None) == (
            tmp_path / "checkpoints" / "best-hmean=0.8-epoch=02.ckpt",
            12,
        )
    assert "picked" in caplog.text and "last.ckpt (step 9)" in caplog.text
    _save(tmp_path, "last.ckpt", 12)
    assert find_checkpoint(tmp_path, None)[0].name == "last.ckpt"  # a tie goes to last.ckpt


def test_no_checkpoint_names_the_folder(tmp_path: Path) -> None:
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt.tmp").write_bytes(b"partial")
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "checkpoints")):
        find_checkpoint(tmp_path, None)


def test_restores_the_run_config_and_applies_only_command_line_keys(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _save(tmp_path, "last.ckpt", 9)
    with caplog.at_level(logging.INFO, logger="ocr.checkpoints.resume"):
        resume = _resume(_composed(tmp_path), ["trainer.max_steps=400", f"resume={tmp_path}"])
    cfg = resume.config
    assert cfg.trainer.max_steps == 400  # given on the command line
    assert cfg.trainer.accelerator == "cpu" and cfg.data.root == "/data/receipts"  # the run's own
    assert cfg.data.batch_size == 8 and list(cfg.data.scale_range) == [0.5, 3.0]
    assert cfg.resume == str(tmp_path) and resume.step == 9 and resume.overrides == ["trainer.max_steps=400"]
    assert cfg.logger.csv.version == "resumed-step9"  # Lightning's CSVLogger would delete metrics.csv
    assert "command-line overrides applied: trainer.max_steps=400" in resume.summary  # logged once claimed
    assert resume.config_name == "config.resumed-step9.yaml"
    with pytest.raises(Exception, match="not in struct"):
        cfg.unknown_key = 1


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("data=receipts", "config groups"),  # composes a whole node
        ("hardware=cpu", "config groups"),  # a global package: no node of that name
        ("~seed", "deletions"),
        ("trainer.max_stpes=4", "has no key"),
    ],
)
def test_refuses_overrides_that_do_not_fit_the_run_config(
    tmp_path: Path, override: str, message: str
) -> None:
    _save(tmp_path, "last.ckpt", 9)
    composed = _composed(tmp_path)
    if "max_stpes" in override:  # as `+trainer.max_stpes=4` would compose it
        with open_dict(composed):
            composed.trainer.max_stpes = 4
    with pytest.raises(ValueError, match=message):
        _resume(composed, [override])


def test_a_moved_run_gets_its_paths_rebased(tmp_path: Path) -> None:
    _save(tmp_path / "old", "last.ckpt", 3)
    (tmp_path / "old").rename(tmp_path / "new")
    cfg = _resume(_composed(tmp_path / "new"), []).config
    assert cfg.paths.output_dir == str(tmp_path / "new")
    assert cfg.callbacks.checkpoint.dirpath == str(tmp_path / "new" / "checkpoints")


def test_another_output_directory_is_refused(tmp_path: Path) -> None:
    _save(tmp_path, "last.ckpt", 3)
    composed = _composed(tmp_path, paths={"output_dir": str(tmp_path / "elsewhere")})
    with pytest.raises(ValueError, match="continues in that directory"):
        _resume(composed, [])


def test_ckpt_path_alone_asks_for_the_run_directory() -> None:
    cfg = OmegaConf.create({"resume": None, "ckpt_path": "/runs/x/checkpoints/last.ckpt"})
    with pytest.raises(ValueError, match="pass resume=<run dir>"):
        resume_from_command_line(cfg, None)


def test_init_from_with_resume_is_refused(tmp_path: Path) -> None:
    _save(tmp_path, "last.ckpt", 3)
    cfg = _composed(tmp_path, model={"init_from": "/runs/pretrain/checkpoints/best.ckpt"})
    with pytest.raises(ResumeRefusedError, match=r"model.init_from=/runs/pretrain/checkpoints/best.ckpt"):
        resume_from_command_line(cfg, None)
    with open_dict(cfg):
        cfg.model.init_from = None
    assert resume_from_command_line(cfg, None) is not None


def test_data_fingerprint_change_is_refused_unless_allowed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    resume = Resume(tmp_path / "last.ckpt", 9, OmegaConf.create({}), [], "aaaa1111", None)
    prepared = []
    datamodule = SimpleNamespace(
        fingerprint="bbbb2222", root=tmp_path / "data", prepare_data=lambda: prepared.append(True)
    )
    with pytest.raises(ValueError, match="aaaa1111 then, bbbb2222 now") as caught:
        resume.check_data(datamodule, allow_change=False)
    assert "resume_allow_data_change=true" in str(caught.value) and prepared
    with caplog.at_level(logging.WARNING, logger="ocr.checkpoints.resume"):
        resume.check_data(datamodule, allow_change=True)
    assert "going on <resume_allow_data_change=true>" in caplog.text
    resume.check_data(SimpleNamespace(fingerprint="aaaa1111", root="x", prepare_data=lambda: None), False)


@pytest.mark.parametrize(
    ("name", "overrides"), [("train", []), ("train", ["resume=/runs/a"]), ("test", ["ckpt=x"])]
)
def test_the_run_directory_is_the_resumed_run_or_a_new_one(name: str, overrides: list[str]) -> None:
    register_resolvers()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(REPO_ROOT / "configs"), version_base="1.3"):
        cfg = compose(config_name=name, overrides=overrides, return_hydra_config=True)
    expected = "/runs/a" if overrides == ["resume=/runs/a"] else f"outputs/{name}/"
    assert cfg.hydra.run.dir.startswith(expected)
    # The run shell writes the .hydra/<time>/ record once the folder is claimed: a refusal writes none.
    assert cfg.hydra.output_subdir is None


@pytest.mark.parametrize("defect", ["stale", "unreadable"])
def test_a_stale_or_unreadable_checkpoint_json_is_not_trusted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, defect: str
) -> None:
    """Killed between the checkpoint's rename and its JSON: the JSON is an older save's (or partial)."""
    path = _save(tmp_path, "last.ckpt", 12)
    meta = Path(f"{path}.json")
    if defect == "stale":
        meta.write_text(json.dumps({"global_step": 9}))
        os.utime(meta, (path.stat().st_mtime - 60,) * 2)
    else:
        meta.write_text('{"global_st')
    with caplog.at_level(logging.WARNING, logger="ocr.checkpoints.resume"):
        assert find_checkpoint(tmp_path, None) == (path, 12)
    assert str(meta) in caplog.text


@pytest.mark.parametrize(
    ("sidecar", "expected"), [('{"data_fingerprint": "aaaa1111"}', "aaaa1111"), ("[1, 2", None)]
)
def test_an_older_checkpoint_fingerprint_comes_from_its_sidecar_when_readable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, sidecar: str, expected: str | None
) -> None:
    """Checkpoints written before the fingerprint was stored inside keep it in their JSON sidecar only."""
    path = _save(tmp_path, "last.ckpt", 9)
    checkpoint = torch.load(path, weights_only=False)
    del checkpoint["data_fingerprint"]
    torch.save(checkpoint, path)
    Path(f"{path}.json").write_text(sidecar)
    with caplog.at_level(logging.WARNING, logger="ocr.checkpoints.resume"):
        resume = _resume(_composed(tmp_path), [f"resume={tmp_path}"])
    assert resume.data_fingerprint == expected
    assert (expected is None) == ("cannot read the data fingerprint" in caplog.text)


@pytest.mark.parametrize(
    ("key", "value", "run_value"), [("model.decoder.channels", 64, 128), ("optimizer.lr", 0.01, 0.001)]
)
def test_a_change_that_the_checkpoint_would_undo_is_refused(
    tmp_path: Path, key: str, value: float, run_value: float
) -> None:
    """The weights are the run's network's and the optimizer state (its lr) is restored from the checkpoint:
    such an override would fail with size mismatches, or be ignored silently."""
    _save(tmp_path, "last.ckpt", 9)
    composed = _composed(tmp_path)
    OmegaConf.update(composed, key, value)  # as Hydra composes `<key>=<value>`
    expected = f"'{key}={value}' changes {key} ({run_value} in the run's config)"
    with pytest.raises(ResumeRefusedError, match=re.escape(expected)):
        _resume(composed, [f"{key}={value}"])
    OmegaConf.update(composed, key, run_value)
    _resume(composed, [f"{key}={run_value}"])  # the run's own value changes nothing


def test_another_runs_checkpoint_is_refused_naming_both_runs(tmp_path: Path) -> None:
    _save(tmp_path / "a", "last.ckpt", 9, run_id="aaaa")
    other = _save(tmp_path / "b", "last.ckpt", 12, run_id="bbbb")
    composed = _composed(tmp_path / "a", ckpt_path=str(other))
    with pytest.raises(ResumeRefusedError) as refused:
        _resume(composed, [])
    message = str(refused.value)
    assert (
        f"ckpt_path={other}: the checkpoint belongs to another run, bbbb written in {tmp_path / 'b'}"
        in message
    )
    assert "this folder holds run aaaa" in message and "resume_allow_other_run=true" in message


def test_another_runs_checkpoint_goes_on_when_allowed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _save(tmp_path / "a", "last.ckpt", 9, run_id="aaaa")
    other = _save(tmp_path / "b", "last.ckpt", 12, run_id="bbbb")
    composed = _composed(tmp_path / "a", ckpt_path=str(other), resume_allow_other_run=True)
    with caplog.at_level(logging.WARNING, logger="ocr.checkpoints.resume"):
        resume = _resume(composed, [])
    assert "going on <resume_allow_other_run=true>" in caplog.text
    assert resume.run_id is None and resume.step == 12
    assert resume.config.paths.output_dir == str(tmp_path / "a")  # nothing points into the other run


@pytest.mark.parametrize(("inside", "refused"), [(True, False), (False, True)])
def test_checkpoints_without_a_run_id_belong_to_the_folder_they_lie_in(
    tmp_path: Path, inside: bool, refused: bool
) -> None:
    """Runs from before run identities: a checkpoint is the run's when it lies in the run's folder."""
    _save(tmp_path / "a", "last.ckpt", 9)
    elsewhere = _save(tmp_path / "a" if inside else tmp_path / "b", "best.ckpt", 6)
    composed = _composed(tmp_path / "a", ckpt_path=str(elsewhere))
    if refused:
        with pytest.raises(ResumeRefusedError, match="(no run id recorded)"):
            _resume(composed, [])
    else:
        assert _resume(composed, []).step == 6


@pytest.mark.parametrize("overrides", [[], ["trainer.max_steps=6"]])
def test_a_resume_with_nothing_to_train_is_refused_with_the_step_and_the_override_that_trains(
    tmp_path: Path, overrides: list[str]
) -> None:
    """It used to test again and rewrite metrics.json with the test keys only, and the run's status."""
    _save(tmp_path, "last.ckpt", 200)  # the run's trainer.max_steps: it finished
    composed = _composed(tmp_path)
    with open_dict(composed):
        composed.trainer.max_steps = 6 if overrides else 400
    with pytest.raises(ResumeRefusedError) as refused:
        _resume(composed, [*overrides, f"resume={tmp_path}"])
    limit = 6 if overrides else 200
    message = str(refused.value)
    assert f"nothing to train, the run is at step 200 and trainer.max_steps={limit}" in message
    assert f"resume={tmp_path} trainer.max_steps=400" in message
    assert "runners/test.py ckpt=" in message
    _resume(_composed(tmp_path), ["trainer.max_steps=400", f"resume={tmp_path}"])  # trains: goes on
