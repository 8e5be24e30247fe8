"""Fault injection: the callback debug=inject adds, its settings, and the faults themselves on the CPU."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from ocr.debug.inject import FaultInjector, InjectedFaultError, apply_fault, injection
from ocr.run.watchdog import StallWatchdog

Compose = Callable[[str, list[str], Path], DictConfig]


def test_no_injection_without_the_overlay(compose_cfg: Compose, tmp_path: Path) -> None:
    cfg = compose_cfg("train", [], tmp_path)
    assert "inject" not in cfg.callbacks
    assert injection(cfg) == (None, None)


def test_the_overlay_adds_the_injector_to_the_runs_callbacks(compose_cfg: Compose, tmp_path: Path) -> None:
    cfg = compose_cfg(
        "train", ["debug=inject", "callbacks.inject.kind=stall", "callbacks.inject.step=3"], tmp_path
    )
    injector = instantiate(cfg.callbacks.inject)
    assert isinstance(injector, FaultInjector)
    assert (injector.kind, injector.step, injector.stall_s) == ("stall", 3, None)
    assert injection(cfg) == ("stall", 3)
    assert list(cfg.callbacks)[-1] == "inject"  # after the run's own callbacks, as the runner added it before


def test_the_overlay_without_a_kind_fails_naming_the_key(compose_cfg: Compose, tmp_path: Path) -> None:
    cfg = compose_cfg("train", ["debug=inject"], tmp_path)
    with pytest.raises(Exception, match="callbacks.inject.kind"):
        instantiate(cfg.callbacks.inject)


def test_stall_lasts_two_and_a_half_watchdog_timeouts_unless_set() -> None:
    watchdog = StallWatchdog(timeout_s=4, repeat=False, exit_on_stall=False, dirpath=None)
    trainer = SimpleNamespace(callbacks=[watchdog])
    assert FaultInjector(kind="stall", step=1, stall_s=None)._stall_seconds(trainer) == 10.0  # type: ignore[arg-type]
    assert FaultInjector(kind="stall", step=1, stall_s=3)._stall_seconds(trainer) == 3  # type: ignore[arg-type]
    no_watchdog = SimpleNamespace(callbacks=[])
    assert FaultInjector(kind="stall", step=1, stall_s=None)._stall_seconds(no_watchdog) == 60.0  # type: ignore[arg-type]


def test_unknown_kind_rejected() -> None:
    with pytest.raises(ValueError, match="callbacks.inject.kind: expected one of"):
        FaultInjector(kind="segfault", step=1, stall_s=None)


def test_injection_reads_a_saved_run_config() -> None:
    saved = {
        "callbacks": {"inject": {"_target_": "ocr.debug.inject.FaultInjector", "kind": "nan_loss", "step": 2}}
    }
    assert injection(OmegaConf.create(saved)) == ("nan_loss", 2)


def test_faults_on_cpu() -> None:
    batch = {"images": torch.zeros(2, 3, 8, 8)}
    with pytest.raises(InjectedFaultError, match="step 4"):
        apply_fault("exception", batch, step=4)
    with pytest.raises(IndexError):
        apply_fault("bad_index", batch, step=0)
    apply_fault("nan_loss", batch, step=0)
    assert torch.isnan(batch["images"]).all()
