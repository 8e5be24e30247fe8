"""Non-finite guard: names the first bad step, checks only every N steps, sees NaN gradients."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from triage_tiny import TinyModule, fit_tiny

from ocr.debug.inject import FaultInjector
from ocr.lightning_modules.callbacks.nonfinite_guard import NonFiniteGuard, NonFiniteLossError


def test_exact_step_with_check_every_step(tmp_path: Path) -> None:
    guard = NonFiniteGuard(check_every_n_steps=1, check_grads=False)
    with pytest.raises(NonFiniteLossError) as info:
        fit_tiny(tmp_path, [guard, FaultInjector(kind="nan_loss", step=2, stall_s=0)])
    assert info.value.step == 2 and info.value.checked_at == 2 and info.value.what == "loss"


def test_first_bad_step_reported_at_the_next_check(tmp_path: Path) -> None:
    guard = NonFiniteGuard(check_every_n_steps=4, check_grads=False)
    with pytest.raises(NonFiniteLossError) as info:
        fit_tiny(tmp_path, [guard, FaultInjector(kind="nan_loss", step=1, stall_s=0)], max_steps=6)
    assert info.value.step == 1
    assert info.value.checked_at == 3  # host read only at the 4th step


def test_step_is_the_optimizer_step_under_gradient_accumulation(tmp_path: Path) -> None:
    guard = NonFiniteGuard(check_every_n_steps=1, check_grads=False)
    faults = [guard, FaultInjector(kind="nan_loss", step=1, stall_s=0)]
    with pytest.raises(NonFiniteLossError) as info:
        fit_tiny(tmp_path, faults, max_steps=3, accumulate_grad_batches=2)
    assert info.value.step == 1  # the third batch, which belongs to optimizer step 1


def test_finite_run_passes(tmp_path: Path) -> None:
    fit_tiny(tmp_path, [NonFiniteGuard(check_every_n_steps=2, check_grads=True)], max_steps=4)


def test_nan_gradient_detected(tmp_path: Path) -> None:
    module = TinyModule()
    module.net[0].weight.register_hook(lambda grad: grad * float("nan"))
    with pytest.raises(NonFiniteLossError) as info:
        fit_tiny(tmp_path, [NonFiniteGuard(check_every_n_steps=1, check_grads=True)], module=module)
    assert info.value.what == "gradient norm" and info.value.step == 0


def test_invalid_interval() -> None:
    with pytest.raises(ValueError, match="check_every_n_steps"):
        NonFiniteGuard(check_every_n_steps=0, check_grads=False)


def test_check_reads_device_flag_once() -> None:
    guard = NonFiniteGuard(check_every_n_steps=10, check_grads=False)
    guard._step = torch.tensor(5)
    guard._record("loss", torch.tensor(True))
    guard.check(5)  # finite: no error
    guard._record("loss", torch.tensor(False))
    with pytest.raises(NonFiniteLossError, match="first seen at global step 5"):
        guard.check(6)


def test_earlier_nan_recorded_when_another_error_stops_the_run(tmp_path: Path) -> None:
    guard = NonFiniteGuard(check_every_n_steps=100, check_grads=False)
    faults = [
        FaultInjector(kind="nan_loss", step=1, stall_s=0),
        FaultInjector(kind="exception", step=3, stall_s=0),
    ]
    with pytest.raises(RuntimeError, match="injected fault"):
        fit_tiny(tmp_path, [guard, *faults], max_steps=6)
    record = json.loads((tmp_path / "crash" / "nonfinite.json").read_text())
    assert record["first_bad"][0] == {"step": 1, "what": "loss"}
