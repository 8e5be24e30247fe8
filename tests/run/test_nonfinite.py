"""The guard's non-finite check: names the first bad step, checks only every N steps, sees NaN gradients."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch.callbacks import Callback
from omegaconf import OmegaConf

from ocr.debug.inject import FaultInjector
from ocr.models.loss import DBLoss
from ocr.run.config import check_config
from ocr.run.guard import Guard
from ocr.run.nonfinite import NonFiniteCheck
from ocr.types import DBOutput
from ocr.utils.errors import ConfigValueError, NonFiniteLossError
from tests.helpers.triage_tiny import TinyModule, fit_tiny


class CudaLossModule(TinyModule):
    """Trains through DBLoss with the CUDA value-check mode (no device asserts), on the CPU.

    From ``nan_from_step`` on, the logits get a NaN pixel, as a diverged network would produce.
    """

    def __init__(self, nan_from_step: int) -> None:
        super().__init__()
        self.nan_from_step = nan_from_step
        self.db_loss = DBLoss(
            prob_weight=5, thresh_weight=10, binary_weight=1, ohem_ratio=3, eps=1e-6, strict=False
        )

    def training_step(self, batch, batch_idx):
        logits = self.net(batch["images"])  # (B, 1, H, W)
        if self.global_step >= self.nan_from_step:
            logits = logits.clone()
            logits[0, 0, 0, 0] = float("nan")
        targets = {
            "prob_map": batch["prob_map"],
            "prob_mask": torch.ones_like(logits),
            "thresh_map": torch.full_like(logits, 0.5),
            "thresh_mask": torch.ones_like(logits),
            "image_id": [f"img{i}" for i in range(logits.shape[0])],
        }
        return self.db_loss.terms(DBOutput(logits, logits, logits), targets, "cuda")["loss"]


def test_exact_step_with_check_every_step(tmp_path: Path) -> None:
    guard = _guard(tmp_path, 1, False)
    with pytest.raises(NonFiniteLossError) as info:
        fit_tiny(tmp_path, [guard, FaultInjector(kind="nan_loss", step=2, stall_s=0)])
    assert info.value.step == 2 and info.value.checked_at == 2 and info.value.what == "loss"
    record = json.loads((tmp_path / "crash" / "nonfinite.json").read_text())
    assert record["first_bad"] == [{"step": 2, "what": "loss"}] and record["detected_at_step"] == 2


def test_cuda_loss_checks_reach_the_guard_instead_of_a_device_assert(tmp_path: Path, monkeypatch) -> None:
    """On CUDA a device assert would poison the context; the NaN must surface as the guard's error."""
    monkeypatch.setattr(torch, "_assert_async", lambda *a: pytest.fail("device assert in CUDA mode"))
    guard = _guard(tmp_path, 3, False)
    with pytest.raises(NonFiniteLossError) as info:
        fit_tiny(tmp_path, [guard], max_steps=4, module=CudaLossModule(nan_from_step=1))
    assert (info.value.step, info.value.what, info.value.checked_at) == (1, "loss", 2)
    record = json.loads((tmp_path / "crash" / "nonfinite.json").read_text())
    assert record["first_bad"][0] == {"step": 1, "what": "loss"}


def _guard(run: Path, every: int, grads: bool) -> Guard:
    return Guard(run_dir=str(run), check_every_n_steps=every, check_grads=grads, fail_on_preflight=False)


def _fake_trainer(
    root: Path, rank: int, world_size: int = 2, other_rank_first_bad: int = -1, node_rank: int = 0
):
    def reduce(tensor, reduce_op):  # the minimum with another rank that holds other_rank_first_bad
        other = torch.full_like(tensor, other_rank_first_bad if other_rank_first_bad >= 0 else tensor.max())
        return torch.minimum(tensor, other)

    return SimpleNamespace(
        default_root_dir=str(root),
        global_rank=rank,
        node_rank=node_rank,
        world_size=world_size,
        strategy=SimpleNamespace(reduce=reduce),
    )


def test_each_rank_writes_its_own_nonfinite_record(tmp_path: Path) -> None:
    trainer = _fake_trainer(tmp_path, rank=3, world_size=4, node_rank=1)
    guard = NonFiniteCheck(check_every_n_steps=10, check_grads=False, crash=tmp_path / "crash-node1-rank3")
    guard._trainer = trainer
    guard._step = torch.tensor(4)
    guard._record("loss", torch.tensor(False))
    guard.on_exception(RuntimeError("another failure"))
    record = json.loads((tmp_path / "crash-node1-rank3" / "nonfinite.json").read_text())
    expected = {"first_bad": [{"step": 4, "what": "loss"}], "detected_at_step": None, "rank": 3, "node": 1}
    assert record == expected
    assert not (tmp_path / "crash").exists()


def test_a_nan_on_another_rank_stops_this_rank_at_the_same_check(tmp_path: Path) -> None:
    """Else this rank would train on and hang in the next collective after the other rank raised."""
    guard = NonFiniteCheck(check_every_n_steps=10, check_grads=False, crash=tmp_path / "crash")
    guard._trainer = _fake_trainer(tmp_path, rank=0, other_rank_first_bad=3)
    guard._step, guard._host_step = torch.tensor(7), 9
    guard._record("loss", torch.tensor(True))
    with pytest.raises(NonFiniteLossError, match="first seen at global step 3"):
        guard.check()
    assert json.loads((tmp_path / "crash" / "nonfinite.json").read_text())["first_bad"][0]["step"] == 3


def test_first_bad_step_reported_at_the_next_check(tmp_path: Path) -> None:
    guard = _guard(tmp_path, 4, False)
    with pytest.raises(NonFiniteLossError) as info:
        fit_tiny(tmp_path, [guard, FaultInjector(kind="nan_loss", step=1, stall_s=0)], max_steps=6)
    assert info.value.step == 1
    assert info.value.checked_at == 3  # host read only at the 4th step


def test_step_is_the_optimizer_step_under_gradient_accumulation(tmp_path: Path) -> None:
    guard = _guard(tmp_path, 1, False)
    faults = [guard, FaultInjector(kind="nan_loss", step=1, stall_s=0)]
    with pytest.raises(NonFiniteLossError) as info:
        fit_tiny(tmp_path, faults, max_steps=3, accumulate_grad_batches=2)
    assert info.value.step == 1  # the third batch, which belongs to optimizer step 1


def test_finite_run_is_checked_and_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every second step the guard reads both flags (loss and gradient norm), finds them finite, goes on."""
    guard = _guard(tmp_path, 2, True)
    seen: list[tuple[int, dict[str, int]]] = []
    check = guard.nonfinite.check

    def spy() -> None:
        flags = guard.nonfinite._first_bad.items()
        seen.append((guard.nonfinite._host_step, {what: int(first) for what, first in flags}))
        check()

    monkeypatch.setattr(guard.nonfinite, "check", spy)
    fit_tiny(tmp_path, [guard], max_steps=4)
    assert [checked_at for checked_at, _ in seen][:2] == [1, 3]
    assert all(flags == {"loss": -1, "gradient norm": -1} for _, flags in seen)
    assert not (tmp_path / "crash").exists()


def test_nan_gradient_detected(tmp_path: Path) -> None:
    module = TinyModule()
    module.net[0].weight.register_hook(lambda grad: grad * float("nan"))
    with pytest.raises(NonFiniteLossError) as info:
        fit_tiny(tmp_path, [_guard(tmp_path, 1, True)], module=module)
    assert info.value.what == "gradient norm" and info.value.step == 0


def test_invalid_interval_is_refused_by_the_config_check() -> None:
    node = {"_target_": "ocr.run.guard.Guard", "run_dir": "x", "check_every_n_steps": 0, "check_grads": False}
    cfg = OmegaConf.create({"callbacks": {"guard": {**node, "fail_on_preflight": False}}})
    with pytest.raises(ConfigValueError, match="callbacks.guard.check_every_n_steps: expected >= 1, got 0"):
        check_config(cfg)


def test_check_reads_device_flag_once(tmp_path: Path) -> None:
    guard = NonFiniteCheck(check_every_n_steps=10, check_grads=False, crash=tmp_path)
    guard._step, guard._host_step = torch.tensor(5), 5
    guard._record("loss", torch.tensor(True))
    guard.check()  # finite: no error
    guard._record("loss", torch.tensor(False))
    guard._host_step = 6
    with pytest.raises(NonFiniteLossError, match="first seen at global step 5"):
        guard.check()


def test_earlier_nan_recorded_when_another_error_stops_the_run(tmp_path: Path) -> None:
    guard = _guard(tmp_path, 100, False)
    faults = [
        FaultInjector(kind="nan_loss", step=1, stall_s=0),
        FaultInjector(kind="exception", step=3, stall_s=0),
    ]
    with pytest.raises(RuntimeError, match="injected fault"):
        fit_tiny(tmp_path, [guard, *faults], max_steps=6)
    record = json.loads((tmp_path / "crash" / "nonfinite.json").read_text())
    assert record["first_bad"][0] == {"step": 1, "what": "loss"}


class _SaveAt(Callback):
    """Saves a checkpoint at the end of training step ``step``, as last.ckpt's step trigger does."""

    def __init__(self, path: Path, step: int) -> None:
        self.path = path
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            trainer.save_checkpoint(self.path)


def test_a_checkpoint_save_between_the_nan_and_its_check_raises_before_writing(tmp_path: Path) -> None:
    guard = _guard(tmp_path, 4, False)
    ckpt = tmp_path / "last.ckpt"
    faults = [guard, FaultInjector(kind="nan_loss", step=1, stall_s=0), _SaveAt(ckpt, step=2)]
    with pytest.raises(NonFiniteLossError) as info:
        fit_tiny(tmp_path, faults, max_steps=6)
    assert info.value.step == 1
    assert not ckpt.exists()  # no NaN weights on disk
