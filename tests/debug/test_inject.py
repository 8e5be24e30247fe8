"""Fault injection: config reading and the faults themselves on the CPU."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from ocr.debug.inject import FaultInjector, InjectedFaultError, apply_fault, fault_callbacks


def test_no_injection_without_config() -> None:
    assert fault_callbacks(OmegaConf.create({"debug": None})) == []
    assert fault_callbacks(OmegaConf.create({})) == []


def test_config_keys_and_stall_default_from_watchdog() -> None:
    cfg = OmegaConf.create(
        {"debug": {"inject": "stall", "inject_step": 3}, "callbacks": {"stall_watchdog": {"timeout_s": 4}}}
    )
    (injector,) = fault_callbacks(cfg)
    assert isinstance(injector, FaultInjector)
    assert (injector.kind, injector.step, injector.stall_s) == ("stall", 3, 10.0)


def test_unknown_kind_rejected() -> None:
    with pytest.raises(ValueError, match="debug.inject: expected one of"):
        fault_callbacks(OmegaConf.create({"debug": {"inject": "segfault"}}))


def test_faults_on_cpu() -> None:
    batch = {"images": torch.zeros(2, 3, 8, 8)}
    with pytest.raises(InjectedFaultError, match="step 4"):
        apply_fault("exception", batch, step=4)
    with pytest.raises(IndexError):
        apply_fault("bad_index", batch, step=0)
    apply_fault("nan_loss", batch, step=0)
    assert torch.isnan(batch["images"]).all()
