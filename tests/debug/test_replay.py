"""Replay of hand-made crash bundles with the real DBNet config: clean, NaN, injected exception, unusable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from ocr.data.collate import collate_batch
from ocr.debug.oom_probe import random_batch
from ocr.debug.replay import EXIT_CLEAN, EXIT_REPRODUCED, EXIT_UNUSABLE, main
from ocr.run.config import compose_config
from ocr.types import TARGET_KEYS, BatchCoding
from tests.helpers.receipt_fixtures import labelled_dataset, make_root, train_transform


def _bundle(
    root: Path, nan: bool = False, callbacks: dict | None = None, step: int = 1, module: dict | None = None
) -> Path:
    crash = root / "crash"
    crash.mkdir(parents=True)
    composed = compose_config("train")
    model, loss = (OmegaConf.to_container(composed[key], resolve=True) for key in ("model", "loss"))
    cfg = {"seed": 0, "model": model, "loss": loss, "trainer": {"precision": "32-true"}}  # resolved, as saved
    if callbacks is not None:
        cfg["callbacks"] = callbacks
    if module is not None:
        cfg["module"] = module
    (crash / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(cfg)))
    batch = random_batch(2, 64, "cpu")
    if nan:
        batch["images"][0, 0, 0, 0] = float("nan")
    torch.save(batch, crash / "batch.pt")
    state = {
        "global_step": step,
        "exception_type": "x.Error",
        "exception_message": "boom",
        "last_checkpoint": None,
        "first_bad_step": None,
        "detected_at_step": None,
    }
    (crash / "state.json").write_text(json.dumps(state))
    return crash


def test_clean_batch_does_not_reproduce(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(_bundle(tmp_path))]) == EXIT_CLEAN
    assert "NOT REPRODUCED" in capsys.readouterr().out


def test_a_compact_batch_is_decoded_as_the_module_decodes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    crash = _bundle(tmp_path)
    compact = {
        "images": torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8),
        **{key: torch.zeros(2, 1, 64, 64, dtype=torch.uint8) for key in TARGET_KEYS},
        "image_id": ["a", "b"],
        "coding": BatchCoding((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 0.3, 0.7),
    }
    torch.save(compact, crash / "batch.pt")
    assert main([str(crash)]) == EXIT_CLEAN
    assert "NOT REPRODUCED" in capsys.readouterr().out


def test_a_batch_the_device_renders_is_replayed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """data.render_on=device: the bundle keeps the source regions and polygons; replay makes the crops
    and draws the maps with the module's decode_batch."""
    crash = _bundle(tmp_path)
    dataset = labelled_dataset(
        make_root(tmp_path / "data", num_images=2), "train", train_transform(64), "device"
    )
    batch = collate_batch([dataset[0], dataset[1]])
    assert batch["warp"] is not None and batch["prob_map"] is None
    torch.save(batch, crash / "batch.pt")
    assert main([str(crash)]) == EXIT_CLEAN
    assert "NOT REPRODUCED" in capsys.readouterr().out


def test_nan_batch_reproduces(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _bundle(tmp_path / "run", nan=True)
    assert main([str(tmp_path / "run")]) == EXIT_REPRODUCED  # the run dir is accepted too
    out = capsys.readouterr().out
    # DBLoss rejects non-finite logits itself; either that error or a NaN loss counts as reproduced.
    assert "\nREPRODUCED: " in out and "finite" in out


def test_injected_exception_is_applied_again(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    injector = {"_target_": "ocr.debug.inject.FaultInjector", "kind": "exception", "step": 1, "stall_s": None}
    crash = _bundle(tmp_path, callbacks={"inject": injector}, step=1)
    assert main([str(crash)]) == EXIT_REPRODUCED
    assert "REPRODUCED: exception InjectedFaultError" in capsys.readouterr().out


def test_unusable_bundle(tmp_path: Path) -> None:
    assert main([str(tmp_path)]) == EXIT_UNUSABLE
    assert main([str(tmp_path), "--sanitizer", "memcheck"]) == EXIT_UNUSABLE  # not 1, "reproduced"


def test_replay_mirrors_the_runs_memory_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Faults tied to channels_last kernels (or cudnn.benchmark, compile) only reproduce with them."""
    crash = _bundle(tmp_path, module={"channels_last": True, "compile": False})
    assert main([str(crash)]) == EXIT_CLEAN
    assert "channels_last=True, cudnn.benchmark=False, compile=False" in capsys.readouterr().out


def test_a_divergence_replays_from_the_weights_the_bundle_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A non-finite loss from optimizer.lr=1e6 replayed as NOT REPRODUCED: replay started from fresh
    weights, on which the saved batch runs cleanly. The bundle now keeps the diverged weights."""
    from ocr.lightning_modules.build import build_net_and_loss

    crash = _bundle(tmp_path)
    net, _ = build_net_and_loss(OmegaConf.load(crash / "config.yaml"))
    with torch.no_grad():
        for parameter in net.parameters():
            parameter.mul_(1e20).mul_(1e20)  # overflows float32: what huge steps leave behind
    torch.save(net.state_dict(), crash / "weights.pt")
    state = json.loads((crash / "state.json").read_text())
    (crash / "state.json").write_text(json.dumps({**state, "weights_file": "weights.pt"}))
    assert main([str(crash)]) == EXIT_REPRODUCED
    out = capsys.readouterr().out
    assert "model: the weights the run had at the failure (step 1, weights.pt;" in out
    assert "\nREPRODUCED: " in out
    assert main([str(crash), "--weights", "fresh"]) == EXIT_CLEAN  # what replay did before
    assert "model: fresh weights (seed 0)" in capsys.readouterr().out
    assert main([str(crash), "--weights", "checkpoint"]) == EXIT_UNUSABLE  # the bundle names none
