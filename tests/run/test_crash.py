"""Crash bundle: files written on an exception, CPU batch saved as it was, OOM extras."""

from __future__ import annotations

import json
from pathlib import Path

import lightning as L
import pytest
import torch

from ocr.debug.inject import FaultInjector, InjectedFaultError
from ocr.models.loss.checks import LossInputError, device_message
from ocr.run.crash import write_crash_bundle
from ocr.run.guard import Guard
from ocr.utils.errors import NonFiniteLossError
from tests.helpers.triage_tiny import TinyModule, fit_tiny, tiny_loader


def test_bundle_written_on_injected_exception(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("seed: 3\n")
    module = TinyModule()
    with pytest.raises(InjectedFaultError):
        fit_tiny(
            tmp_path,
            [
                Guard(
                    run_dir=str(tmp_path), check_every_n_steps=50, check_grads=True, fail_on_preflight=False
                ),
                FaultInjector(kind="exception", step=2, stall_s=0),
            ],
            module=module,
        )
    crash = tmp_path / "crash"
    state = json.loads((crash / "state.json").read_text())
    assert state["global_step"] == 2 and state["batch_idx"] == 2
    assert state["exception_type"].endswith("InjectedFaultError")
    assert state["batch_shapes"]["images"] == [2, 3, 16, 16]
    batch = torch.load(crash / "batch.pt", weights_only=False)
    expected = list(tiny_loader())[2]  # step 2 = third batch of the first epoch
    assert torch.equal(batch["images"], expected["images"])
    assert "InjectedFaultError" in (crash / "traceback.txt").read_text()
    assert (crash / "config.yaml").read_text() == "seed: 3\n"
    assert "packages" in json.loads((crash / "environment.json").read_text())
    rng = torch.load(crash / "rng.pt", weights_only=False)
    assert {"torch", "numpy", "python"} <= set(rng)
    assert not (crash / "memory.txt").exists()


def test_oom_bundle_has_memory_report_and_suggestion(tmp_path: Path) -> None:
    trainer = L.Trainer(default_root_dir=tmp_path, logger=False, accelerator="cpu")
    exc = torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    batch = {"images": torch.zeros(8, 3, 16, 16)}
    crash = write_crash_bundle(
        tmp_path, trainer, TinyModule(), exc, environment={"test": True}, batch=batch, batch_idx=None
    )
    state = json.loads((crash / "state.json").read_text())
    assert state["out_of_memory"] is True and state["cuda_fault"] is False
    assert "data.batch_size=4" in state["memory"]["suggestion"]
    assert state["memory"]["batch_shapes"]["images"] == [8, 3, 16, 16]
    assert (crash / "memory.txt").exists()
    assert json.loads((crash / "environment.json").read_text()) == {"test": True}


@pytest.mark.parametrize(
    ("exception", "kept"),
    [
        (NonFiniteLossError(step=3, what="loss", checked_at=4), True),
        (LossInputError(f"{device_message('prob_logits')} (image ids: ['a.jpg'])"), True),
        (LossInputError("prob_map: expected shape (B, 1, H, W), got (2, 3) (image ids: ['a.jpg'])"), False),
        (InjectedFaultError("injected"), False),
    ],
)
def test_a_divergence_keeps_the_networks_weights_for_replay(
    tmp_path: Path, exception: Exception, kept: bool
) -> None:
    module = TinyModule()
    trainer = L.Trainer(default_root_dir=tmp_path, logger=False, accelerator="cpu")
    batch = {"images": torch.zeros(2, 3, 16, 16)}
    crash = write_crash_bundle(
        tmp_path, trainer, module, exception, environment={"test": True}, batch=batch, batch_idx=None
    )
    state = json.loads((crash / "state.json").read_text())
    assert state["weights_file"] == ("weights.pt" if kept else None)
    assert (crash / "weights.pt").is_file() == kept
    if kept:
        saved = torch.load(crash / "weights.pt", weights_only=False)
        assert saved.keys() == module.net.state_dict().keys()
        assert all(torch.equal(saved[k], v) for k, v in module.net.state_dict().items())
