"""Doctor: fast checks run cleanly without a GPU; verdicts, table and JSON; CPU-flag mismatch fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ocr.doctor.cli import check_dataloader, main
from ocr.doctor.distributed import check_distributed
from ocr.machine import checks
from ocr.machine.checks import CheckResult, fast_checks, format_table, rate_missing_gpu, worst_status
from tests.helpers.launch_env import TORCHRUN_NODE1


def test_fast_checks_cover_everything(tmp_path: Path) -> None:
    results = fast_checks(tmp_path / "out")
    assert [r.name for r in results] == ["versions", "gpu", "cuda_usable", "cpu", "wsl", "disk", "shm"]
    assert all(r.status in ("ok", "warn", "fail") for r in results)
    assert all(r.fix for r in results if r.status != "ok")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_no_gpu_is_a_clean_warning(tmp_path: Path) -> None:
    gpu = next(r for r in fast_checks(tmp_path) if r.name == "gpu")
    assert gpu.status == "warn" and "no CUDA GPU visible" in gpu.detail
    # Without an NVIDIA driver it is a CPU machine: ok, as a run's preflight rates it (issue 30).
    [rated] = rate_missing_gpu([gpu], driver=None)
    assert rated.status == "ok" and rated.detail == "no GPU on this machine: training on the CPU"
    assert rate_missing_gpu([gpu], driver="550.54") == [gpu]


def test_cpu_capability_beyond_cpu_flags_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = {
        "model": "old cpu",
        "flags_known": True,
        "torch_capability": "AVX512",
        "flags": {"avx": True, "avx2": True, "fma": True, "avx512f": False},
    }
    monkeypatch.setattr(checks, "cpu_info", lambda: fake)
    result = checks.check_cpu_flags()
    assert result.status == "fail" and "ATEN_CPU_CAPABILITY" in result.fix


def test_worst_status_and_table() -> None:
    results = [CheckResult("a", "ok", "fine"), CheckResult("b", "warn", "hmm", "do x")]
    assert worst_status(results) == "warn" and worst_status([]) == "ok"
    table = format_table(results)
    assert "fix: do x" in table and table.endswith("verdict: warn")


def test_dataloader_workers_start() -> None:
    assert check_dataloader(num_workers=2).status == "ok"


def test_cli_fast_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["--fast", "--json", "--out", str(tmp_path)])
    report = json.loads(capsys.readouterr().out)
    assert status == (1 if report["verdict"] == "fail" else 0)
    assert {c["name"] for c in report["checks"]} >= {"gpu", "cpu", "disk"}
    assert "packages" in report["environment"]
    assert json.loads((tmp_path / "doctor.json").read_text())["verdict"] == report["verdict"]
    assert (tmp_path / "doctor.txt").read_text().strip().endswith(f"verdict: {report['verdict']}")


def test_the_launch_is_reported(tmp_path: Path) -> None:
    result = check_distributed(num_nodes=2, devices=2, data_root=tmp_path, gpus=2, env=TORCHRUN_NODE1)
    assert result.status == "ok"
    assert result.detail == (
        "torchelastic: rank 3 of 4, local rank 1, node 1 of 2, 2 processes per node, master node0:29500, "
        "run id job42"
    )
    alone = check_distributed(gpus=0, env={})
    assert alone.status == "ok" and alone.detail.startswith("one process")


def test_the_usual_launch_mistakes_are_warned_about(tmp_path: Path) -> None:
    result = check_distributed(
        num_nodes=4, devices=8, data_root=tmp_path / "not_mounted", gpus=4, env=TORCHRUN_NODE1
    )
    assert result.status == "warn"
    assert "trainer.num_nodes=4, but torchelastic started 2 nodes" in result.detail
    assert "trainer.devices=8, but torchelastic started 2 processes on this node" in result.detail
    assert "trainer.devices=8, but this node has 4 GPUs" in result.detail
    assert f"data root {tmp_path / 'not_mounted'} is not visible on this node" in result.detail
    assert "trainer.num_nodes=2" in result.fix and "trainer.devices=2" in result.fix


def test_cli_reports_the_launch_and_checks_the_planned_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in TORCHRUN_NODE1.items():
        monkeypatch.setenv(key, value)
    main(["--fast", "--json", "--out", str(tmp_path), "--num-nodes", "3", "--data-root", str(tmp_path / "x")])
    report = json.loads(capsys.readouterr().out)
    row = next(c for c in report["checks"] if c["name"] == "distributed")
    assert (
        row["status"] == "warn" and "trainer.num_nodes=3, but torchelastic started 2 nodes" in row["detail"]
    )
    assert report["distributed"]["launcher"] == "torchelastic" and report["distributed"]["node_rank"] == 1
    assert report["distributed"]["variables"]["MASTER_ADDR"] == "node0"
