"""Every config composes in struct mode; misspelled keys fail naming the key."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from hydra.errors import ConfigCompositionException, InstantiationException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationKeyError, MissingMandatoryValue

from ocr.lightning_modules.build import build_module, build_net_and_loss
from ocr.machine import hardware
from ocr.metrics.cleval.metric import CLEvalMetric
from ocr.models.dbnet import DBNet
from ocr.types import TARGET_KEYS
from tests.helpers.paths import REPO_ROOT

CONFIG_DIR = str(REPO_ROOT / "configs")
Compose = Callable[[str, list[str]], DictConfig]


@pytest.fixture
def compose(compose_cfg: Callable[[str, list[str], Path], DictConfig], tmp_path: Path) -> Compose:
    """``compose(name, overrides)``: the conftest composer with this test's output directory."""
    return lambda name, overrides: compose_cfg(name, overrides, tmp_path)


def _group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (Path(CONFIG_DIR) / group).glob("*.yaml"))


@pytest.mark.parametrize(
    "group",
    ["data", "model", "hardware", "performance", "logger", "callbacks", "experiment", "debug", "scheduler"],
)
def test_every_group_option_composes(group: str, compose: Compose) -> None:
    options = _group_options(group)
    assert options, f"configs/{group}/: expected at least one option (*.yaml), found none"
    for option in options:
        overrides = [f"{group}={option}"]
        if group in ("experiment",) or option == "receipts":
            overrides.append("data.root=/nonexistent")
        if group == "experiment":
            overrides.append("model.init_from=/nonexistent.ckpt")
        cfg = compose("train", overrides)
        for node in ("trainer", "data", "model", "module", "callbacks", "logger"):
            OmegaConf.resolve(cfg[node])
        assert cfg.model._target_ == "ocr.models.dbnet.DBNet"


@pytest.mark.parametrize(
    "name,extra",
    [("test", ["ckpt=x.ckpt"]), ("predict", ["ckpt=x.ckpt", "image_dir=d"]), ("export", ["ckpt=x.ckpt"])],
)
def test_test_and_predict_configs_compose(name: str, extra: list[str], compose: Compose) -> None:
    cfg = compose(name, extra)
    assert cfg.ckpt == "x.ckpt"


def test_misspelled_override_fails_naming_the_key(compose: Compose) -> None:
    with pytest.raises(ConfigCompositionException) as err:
        compose("train", ["model.encoder.nmae=resnet18"])
    assert "model.encoder.nmae" in str(err.value) + str(err.value.__cause__)


def test_unknown_added_key_fails_at_instantiation(compose: Compose) -> None:
    cfg = compose("train", ["+model.decoder.channls=64"])
    with pytest.raises(InstantiationException, match="channls"):
        build_net_and_loss(cfg)


@pytest.mark.parametrize("mode", ["competition", "upstream"])
def test_default_module_builds_with_the_metric_mode(compose: Compose, mode: str) -> None:
    cfg = compose("train", [f"metric.mode={mode}"])
    module = build_module(cfg)
    assert isinstance(module.net, DBNet) and isinstance(module.val_metric, CLEvalMetric)
    assert module.val_metric.options.mode == module.test_metric.options.mode == mode
    assert module.scheduler_factory.keywords["kind"] == cfg.scheduler.kind == "poly"
    assert module.optimizer_factory.keywords["lr"] == cfg.optimizer.lr


def test_default_module_trains_one_step(compose: Compose) -> None:
    """The default config's module runs forward, loss and backward with gradients reaching the head."""
    module = build_module(compose("train", []))
    output = module(torch.rand(2, 3, 64, 96))
    assert all(tuple(t.shape) == (2, 1, 64, 96) for t in output)
    targets = {key: torch.full((2, 1, 64, 96), 0.5 if key == "thresh_map" else 1.0) for key in TARGET_KEYS}
    targets["prob_map"] = torch.zeros(2, 1, 64, 96)
    loss = module.loss(output, {**targets, "image_id": ["a", "b"]})["loss"]
    assert torch.isfinite(loss) and loss > 0
    loss.backward()
    assert all(p.grad is not None for p in module.net.head.parameters())


@pytest.mark.parametrize("gpu", [False, True])
def test_the_default_run_is_the_five_minute_recipe_on_a_cpu_only(
    compose: Compose, monkeypatch: pytest.MonkeyPatch, gpu: bool
) -> None:
    """On a CPU: a 5-minute budget, 160 px crops and an FPN of 128 channels; a GPU keeps the full recipe."""
    monkeypatch.setattr(hardware, "has_cuda", lambda: gpu)
    cfg = compose("train", [])
    expected = (None, 256, 640, -1) if gpu else (5, 128, 160, 200)
    found = (
        cfg.time_budget_minutes,
        cfg.model.decoder.channels,
        cfg.data.train_transform.crop_size,
        cfg.trainer.max_steps,
    )
    assert found == expected
    assert cfg.callbacks.time_budget.minutes == expected[0]


@pytest.mark.parametrize("gpu", [False, True])
def test_the_hardware_preset_decides_the_machine_values_on_any_machine(
    compose: Compose, monkeypatch: pytest.MonkeyPatch, gpu: bool
) -> None:
    """hardware=cpu beside a GPU trains like a CPU (model width, crops, budget, CPU precision); a GPU
    preset keeps the GPU values on a machine without one."""
    monkeypatch.setattr(hardware, "has_cuda", lambda: gpu)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    monkeypatch.setattr(hardware, "cuda_has_native_bf16", lambda: True)
    monkeypatch.setattr(hardware, "cpu_has_native_bf16", lambda: False)
    cpu = compose("train", ["hardware=cpu"])
    cpu_values = (cpu.model.decoder.channels, cpu.data.train_transform.crop_size, cpu.time_budget_minutes)
    assert cpu_values == (128, 160, 5) and cpu.trainer.precision == "32-true"
    gpu_cfg = compose("train", ["hardware=h100_80gb"])
    assert (gpu_cfg.model.decoder.channels, gpu_cfg.data.train_transform.crop_size) == (256, 640)
    assert gpu_cfg.time_budget_minutes is None


@pytest.mark.parametrize("gpu", [False, True])
def test_hardware_auto_states_the_values_of_the_machine_it_finds(
    compose: Compose, monkeypatch: pytest.MonkeyPatch, gpu: bool
) -> None:
    """auto's hw.pick pairs are the values of hardware/machine/cpu.yaml and gpu.yaml (no drift)."""
    monkeypatch.setattr(hardware, "has_cuda", lambda: gpu)
    auto = OmegaConf.to_container(compose("train", []).machine, resolve=True)
    preset = compose("train", ["hardware=h100_80gb" if gpu else "hardware=cpu"]).machine
    assert auto == OmegaConf.to_container(preset, resolve=True)


def test_machine_resolvers_appear_only_in_the_hardware_presets() -> None:
    """Only configs/hardware/ asks the machine (hw.*); the other groups read the preset's values."""
    outside = [
        f"{path.relative_to(CONFIG_DIR)}:{number}"
        for path in sorted(Path(CONFIG_DIR).rglob("*.yaml"))
        if path.relative_to(CONFIG_DIR).parts[0] != "hardware"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "${hw." in line
    ]
    assert not outside, f"hw.* resolvers outside configs/hardware/: {outside}"


def test_synthetic_pretrain_trains_at_receipt_scale_on_its_own_large_set(compose: Compose) -> None:
    cfg = compose("train", ["experiment=synthetic_pretrain"])
    default = compose("train", [])
    assert cfg.data.synthetic.num_train >= 1000 and cfg.data.synthetic.long_side == 1024
    assert cfg.data.root != default.data.root and "synthetic_pretrain_receipt_line" in cfg.data.root
    assert (cfg.data.synthetic.style, cfg.data.synthetic.granularity) == ("receipt", "line")
    transform = cfg.data.train_transform
    assert (transform.train_long_side, cfg.data.eval_transform.long_side) == (1024, 1024)
    assert cfg.trainer.max_steps > 0
    # this machine has no GPU: the 60-minute CPU recipe, sized by its budget (on a GPU: steps)
    assert (cfg.time_budget_minutes, transform.crop_size, cfg.data.synthetic.num_train) == (55, 320, 1200)
    assert cfg.trainer.check_val_every_n_epoch == 2 and cfg.trainer.val_check_interval == 1.0
    assert cfg.callbacks.checkpoint.monitor == "val/hmean" and cfg.callbacks.checkpoint.mode == "max"


def test_receipts_finetune_needs_its_init_weights(compose: Compose) -> None:
    cfg = compose("train", ["experiment=receipts_finetune", "data.root=/receipts"])
    with pytest.raises(InterpolationKeyError, match="model.init_from"):
        build_net_and_loss(cfg)
    assert isinstance(build_net_and_loss(cfg, weights_free=True)[0], DBNet)
    cfg = compose("train", ["experiment=receipts_finetune", "data.root=/receipts", "model.init_from=/p.ckpt"])
    assert cfg.model.init_from == "/p.ckpt" and cfg.data.train_transform.crop_size == 320  # CPU recipe
    assert (cfg.time_budget_minutes, cfg.trainer.max_steps) == (28, 1200)  # 200 and 500 steps underfit
    assert cfg.trainer.check_val_every_n_epoch == 25  # keeps last.ckpt: validations only monitor
    assert cfg.optimizer.lr == compose("train", []).optimizer.lr  # 3e-4 underfit in 200 steps
    assert cfg.data.eval_transform.long_side == 1280 and cfg.metric.mode == "competition"
    assert cfg.data.train_transform.photo.p == 0.5 and compose("train", []).data.train_transform.photo.p == 0
    # The base post-processing with extend_ends 0.2 (picked on val over seeds); it keeps last.ckpt, an EMA.
    post = cfg.postprocess
    assert (post.thresh, post.box_thresh, post.unclip_ratio, post.extend_ends) == (0.3, 0.5, 1.5, 0.2)
    assert (post.relative_box_thresh, post.small_box_thresh, post.small_side) == (0.75, 0.6, 0.6)
    assert compose("train", []).postprocess.relative_box_thresh == 0.0
    assert cfg.callbacks.checkpoint.keep == "last" and cfg.callbacks.ema.decay == 0.99
    assert compose("train", []).callbacks.checkpoint.keep == "best"
    with pytest.raises(MissingMandatoryValue, match="data.root"):
        _ = compose("train", ["experiment=receipts_finetune", "model.init_from=/p.ckpt"]).data.root
