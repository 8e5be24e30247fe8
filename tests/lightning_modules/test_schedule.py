import math

import pytest
import torch

from ocr.lightning_modules.schedule import (
    WarmupDecay,
    build_warmup_scheduler,
    resize_schedules,
    warmup_decay_factor,
)


def _lrs(kind: str, total: int, warmup_ratio: float) -> list[float]:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = build_warmup_scheduler(
        opt, total_steps=total, kind=kind, warmup_ratio=warmup_ratio, power=0.9, min_lr_ratio=0.0
    )
    lrs = []
    for _ in range(total):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return lrs


@pytest.mark.parametrize("kind", ["poly", "cosine"])
def test_schedule_warms_up_then_decays_to_zero(kind: str) -> None:
    lrs = _lrs(kind, total=100, warmup_ratio=0.1)
    assert lrs[0] == pytest.approx(0.1)
    assert max(lrs) == pytest.approx(1.0)
    assert lrs.index(max(lrs)) == 9
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:], strict=False))
    assert lrs[-1] < 0.05


def test_schedule_is_not_constant_without_warmup() -> None:
    lrs = _lrs("poly", total=10, warmup_ratio=0.0)
    assert len(set(lrs)) == 10


def test_schedule_rejects_bad_inputs() -> None:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(ValueError, match="total_steps"):
        build_warmup_scheduler(opt, total_steps=0, kind="poly", warmup_ratio=0.0, power=1.0, min_lr_ratio=0.0)
    with pytest.raises(ValueError, match="scheduler.kind"):
        warmup_decay_factor(5, total_steps=10, warmup_steps=0, kind="step", power=1.0, min_lr_ratio=0.0)
    with pytest.raises(ValueError, match="scheduler.power"):
        build_warmup_scheduler(opt, total_steps=10, kind="poly", warmup_ratio=0.1, min_lr_ratio=0.0)


@pytest.mark.parametrize("power", [None, 1.0])  # cosine.yaml has no power; old run configs stored 1.0
def test_cosine_ignores_power(power: float | None) -> None:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = build_warmup_scheduler(
        opt, total_steps=10, kind="cosine", warmup_ratio=0.0, power=power, min_lr_ratio=0.0
    )
    for _ in range(5):
        opt.step()
        sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.5)))


def test_resized_schedule_decays_over_the_new_length_and_survives_a_checkpoint() -> None:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = build_warmup_scheduler(
        opt, total_steps=100, kind="poly", warmup_ratio=0.1, power=1.0, min_lr_ratio=0.0
    )
    for _ in range(5):
        opt.step()
        sched.step()
    assert resize_schedules([sched], 20) == 1
    state = sched.state_dict()
    restored = build_warmup_scheduler(
        torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0),
        total_steps=100,
        kind="poly",
        warmup_ratio=0.1,
        power=1.0,
        min_lr_ratio=0.0,
    )
    restored.load_state_dict(state)
    [factor] = restored.lr_lambdas
    assert isinstance(factor, WarmupDecay) and (factor.total_steps, factor.warmup_steps) == (20, 2)
    assert factor(20) == 0.0 and factor(11) == pytest.approx(1 - 9 / 18)
    with pytest.raises(ValueError, match="total_steps"):
        resize_schedules([sched], 0)
