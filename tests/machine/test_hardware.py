"""hardware=auto decisions with the GPU capabilities mocked: native bf16 only, no silent CPU fallback."""

from __future__ import annotations

import pytest
import torch

from ocr.doctor import smoke
from ocr.machine import checks, hardware
from ocr.machine.hardware import CudaUnusableError, auto_precision, pick


def _gpu(monkeypatch: pytest.MonkeyPatch, native_bf16: bool) -> None:
    """A visible GPU; bf16 is always 'supported' with emulation (as torch reports a T4), natively or not."""

    def is_bf16_supported(including_emulation: bool = True) -> bool:
        return including_emulation or native_bf16

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", is_bf16_supported)


@pytest.mark.parametrize(("native_bf16", "precision"), [(True, "bf16-mixed"), (False, "16-mixed")])
def test_precision_uses_bf16_only_where_the_gpu_has_it_natively(monkeypatch, native_bf16, precision):
    _gpu(monkeypatch, native_bf16)
    assert auto_precision() == precision


@pytest.mark.parametrize(("native_bf16", "dtypes"), [(True, ["fp32", "bf16"]), (False, ["fp32"])])
def test_smoke_variants_skip_emulated_bf16(monkeypatch, native_bf16, dtypes):
    _gpu(monkeypatch, native_bf16)
    assert sorted({dtype for _, dtype, _ in smoke.variants()}) == sorted(dtypes)


def _driver_without_cuda(monkeypatch: pytest.MonkeyPatch, driver: str | None) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(checks, "driver_version", lambda: driver)

    def init() -> None:
        raise RuntimeError("The NVIDIA driver on your system is too old (found version 12040).")

    monkeypatch.setattr(torch.cuda, "init", init)


def test_driver_present_but_cuda_unusable_stops_instead_of_training_on_the_cpu(monkeypatch):
    _driver_without_cuda(monkeypatch, "550.54.15")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(torch.version, "cuda", "13.2")
    with pytest.raises(CudaUnusableError) as info:
        pick("cpu", "gpu")
    message = str(info.value)
    for part in ("550.54.15", "CUDA 13.2", "too old", "CUDA_VISIBLE_DEVICES=", "debug_cuda.sh doctor"):
        assert part in message, f"{part!r} not in {message!r}"
    verdict = checks.check_cuda_usable()
    assert verdict.status == "fail" and "550.54.15" in verdict.detail


def test_cpu_only_torch_on_a_gpu_machine_is_named(monkeypatch):
    _driver_without_cuda(monkeypatch, "580.65")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(torch.version, "cuda", None)
    with pytest.raises(CudaUnusableError, match="CPU-only build"):
        hardware.has_cuda()


@pytest.mark.parametrize("visible", ["", "-1"])
def test_hidden_gpus_train_on_the_cpu_on_purpose(monkeypatch, visible):
    _driver_without_cuda(monkeypatch, "550.54.15")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert pick("cpu", "gpu") == "cpu"


def test_no_driver_is_a_cpu_machine(monkeypatch):
    _driver_without_cuda(monkeypatch, None)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert pick("cpu", "gpu") == "cpu"
    assert checks.check_cuda_usable().status == "ok"


@pytest.mark.parametrize(
    ("cores", "cap", "devices", "workers"), [(16, 16, 1, 15), (16, 8, 2, 7), (16, 8, 8, 1), (2, 8, 1, 1)]
)
def test_workers_share_the_cores_between_ddp_processes(monkeypatch, cores, cap, devices, workers):
    monkeypatch.setattr(hardware.os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    assert hardware.auto_workers(cap, devices) == workers


def test_all_visible_gpus_count_as_devices(monkeypatch):
    monkeypatch.setattr(hardware.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert hardware.auto_workers(8, -1) == 3


@pytest.mark.parametrize(
    ("devices", "processes"),
    [(None, 4), ("2", 2), ("[0,1]", 2), ("'0,1'", 2), ("'1,'", 1), ("auto", 4), ("-1", 4), ("'-1'", 4)],
)
def test_ddp_preset_resolves_workers_for_every_device_form(
    monkeypatch, tmp_path, compose_cfg, devices, processes
):
    """hardware=multi_gpu_ddp resolves data.num_workers for each trainer.devices form Lightning accepts."""
    from omegaconf import OmegaConf

    monkeypatch.setattr(hardware.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    overrides = ["hardware=multi_gpu_ddp"] + ([] if devices is None else [f"trainer.devices={devices}"])
    cfg = compose_cfg("train", overrides, tmp_path)
    OmegaConf.resolve(cfg.data)
    assert cfg.data.num_workers == min(8, 16 // processes - 1)


def test_no_visible_gpu_counts_as_one_process(monkeypatch):
    monkeypatch.setattr(hardware.os, "sched_getaffinity", lambda pid: set(range(4)), raising=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert hardware.auto_workers(8, "auto") == hardware.auto_workers(8, -1) == 3


def test_multi_node_preset_takes_nodes_and_processes_from_torchrun(monkeypatch, tmp_path, compose_cfg):
    """torchrun --nnodes=2 --nproc-per-node=4 on 16-core nodes: 2 nodes, 4 devices, 3 workers each."""
    from omegaconf import OmegaConf

    torchrun = {"RANK": "5", "LOCAL_RANK": "1", "GROUP_RANK": "1", "LOCAL_WORLD_SIZE": "4", "WORLD_SIZE": "8"}
    for key, value in torchrun.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("SLURM_NTASKS", raising=False)
    monkeypatch.setattr(hardware.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    cfg = compose_cfg("train", ["hardware=multi_node"], tmp_path)
    OmegaConf.resolve(cfg)
    assert (cfg.trainer.num_nodes, cfg.trainer.devices, cfg.data.num_workers) == (2, 4, 3)


def test_multi_node_preset_without_a_launcher_is_one_node(monkeypatch, tmp_path, compose_cfg):
    from omegaconf import OmegaConf

    for key in (
        "RANK",
        "LOCAL_RANK",
        "GROUP_RANK",
        "LOCAL_WORLD_SIZE",
        "WORLD_SIZE",
        "SLURM_NTASKS",
        "NODE_RANK",
    ):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(hardware, "has_cuda", lambda: False)
    cfg = compose_cfg("train", ["hardware=multi_node"], tmp_path)
    OmegaConf.resolve(cfg.trainer)
    assert (cfg.trainer.num_nodes, cfg.trainer.devices, cfg.trainer.accelerator) == (1, 1, "cpu")
