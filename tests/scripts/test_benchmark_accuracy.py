"""scripts/benchmark_accuracy.py: its statistics, tables and commands (the tiny run through the real
runners: tests/e2e/test_benchmark_accuracy.py)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from tests.helpers.scripts import load_script

bench = load_script("benchmark_accuracy")


def _protocol(tmp_path: Path, **changes: object) -> object:
    base = {
        "init_from": tmp_path / "pre.ckpt",
        "data_root": tmp_path / "data",
        "out": tmp_path / "out" / "v",
        "steps": 120,
        "python": "python3",
    }
    return bench.Protocol(**{**base, **changes})


def test_summary_is_mean_standard_error_and_sample_sd() -> None:
    stats = bench.summarize([0.97, 0.98, 0.99])
    assert stats["n"] == 3 and stats["mean"] == pytest.approx(0.98)
    assert stats["sd"] == pytest.approx(0.01)  # sample sd (n - 1)
    assert stats["se"] == pytest.approx(0.01 / math.sqrt(3))
    assert stats["min"] == pytest.approx(0.97)
    assert bench.summarize([0.5]) == {"n": 1, "mean": 0.5, "se": None, "sd": None, "min": 0.5}
    assert bench.summarize([])["mean"] is None


def test_the_table_has_a_row_per_candidate_set_and_mode_with_each_seed_mean_se_and_min() -> None:
    def seed(n: int, test: float, proxy: float) -> object:
        scores = {
            "kept test": {m: {"hmean": test, "precision": 1.0, "recall": test} for m in bench.MODES},
            "kept proxy": {"upstream": {"hmean": proxy, "precision": 1.0, "recall": proxy}},  # one mode only
        }
        return bench.SeedResult(seed=n, train_seconds=100.0 + n, scores=scores)

    results = [seed(0, 0.90, 0.80), seed(1, 0.94, 0.84)]
    assert bench.columns(results) == [
        ("kept test", "upstream"),
        ("kept test", "competition"),
        ("kept proxy", "upstream"),
    ]
    stats = bench.aggregate(results)
    assert stats["kept test/upstream"]["mean"] == pytest.approx(0.92)
    assert stats["kept test/upstream"]["se"] == pytest.approx(0.02)
    assert stats["kept test/upstream"]["min"] == pytest.approx(0.90)
    assert stats["train_seconds"]["mean"] == pytest.approx(100.5)
    peer = {"test": {"upstream": {"hmean": 0.93}}}
    table = bench.markdown("recipe", results, peer).splitlines()
    assert table[2] == "| candidate | set | mode | seed 0 | seed 1 | mean ± SE | min |"
    assert table[4] == "| kept | test | upstream | 0.9000 | 0.9400 | 0.9200 ± 0.0200 | 0.9000 |"
    assert table[6] == "| kept | proxy | upstream | 0.8000 | 0.8400 | 0.8200 ± 0.0200 | 0.8000 |"
    assert table[7] == "| peer | test | upstream | - | - | 0.9300 | - |"
    assert table[8] == "| training | - | wall s | 100 | 101 | 100 | - |"


def test_commands_carry_the_protocol_and_put_the_variant_last(tmp_path: Path) -> None:
    protocol = _protocol(
        tmp_path,
        splits=("val", "test"),
        hardware="h100_80gb",
        overrides=("model=dbnetpp_resnet18", "seed=99"),
        extra_train_roots=(tmp_path / "p1", tmp_path / "p2"),
        proxy_root=tmp_path / "photo",
        eval_overrides=("postprocess.thresh=0.25",),
    )
    train = bench.train_command(protocol, tmp_path / "data", 3, tmp_path / "run")
    assert train[:3] == ["python3", "runners/train.py", "experiment=receipts_finetune"]
    for expected in (
        f"data.root={tmp_path / 'data'}",
        f"model.init_from={tmp_path / 'pre.ckpt'}",
        "seed=3",
        "trainer.max_steps=120",
        "test_after_fit=false",
        "hardware=h100_80gb",
        f"data.extra_train_roots=[{tmp_path / 'p1'},{tmp_path / 'p2'}]",
        f"hydra.run.dir={tmp_path / 'run'}",
    ):
        assert expected in train, expected
    assert train[-2:] == ["model=dbnetpp_resnet18", "seed=99"]  # the variant's overrides win
    as_written = bench.train_command(_protocol(tmp_path, steps=None), tmp_path, 0, tmp_path)
    assert not [o for o in as_written if o.startswith(("trainer.", "time_budget", "data.train_transform"))]
    predict = bench.predict_command(
        protocol, tmp_path / "last.ckpt", tmp_path / "photo", "test", tmp_path / "p"
    )
    assert f"image_dir={tmp_path / 'photo' / 'images' / 'test'}" in predict
    assert predict[-1] == "postprocess.thresh=0.25" and "hardware=h100_80gb" in predict
    assert "model=dbnetpp_resnet18" not in predict  # the network comes from the checkpoint
    evaluate = bench.evaluate_command(
        protocol, tmp_path / "gt.json", tmp_path / "pred.json", "upstream", tmp_path
    )
    assert evaluate[1] == "runners/evaluate.py" and "mode=upstream" in evaluate
    assert protocol.eval_sets(tmp_path / "data") == {
        "val": (tmp_path / "data", "val"),
        "test": (tmp_path / "data", "test"),
        "proxy": (tmp_path / "photo", "test"),
    }


def test_arguments_default_to_this_interpreter_and_absolute_paths(tmp_path: Path) -> None:
    args = bench.parse_args(["--init-from", "pre.ckpt", "--variant", "v1", "--override", "a=1"])
    protocol = bench.protocol_from_args(args)
    assert protocol.python == sys.executable and protocol.hardware is None
    assert protocol.init_from.is_absolute() and protocol.out.name == "v1"
    assert protocol.data_root == bench.DEFAULT_ROOT.resolve() and protocol.overrides == ("a=1",)
    assert bench.last_json_line('log\n{"hmean": 0.5}\n') == {"hmean": 0.5}
    with pytest.raises(ValueError, match="no JSON summary line"):
        bench.last_json_line("nothing\n")


def test_a_variant_folder_refuses_another_protocol(tmp_path: Path) -> None:
    protocol = _protocol(tmp_path)
    bench.claim_variant(protocol, None)
    bench.claim_variant(_protocol(tmp_path, python="python3.11"), None)  # the interpreter may change
    with pytest.raises(SystemExit, match=r"another protocol \(differs in label_subset, steps\)"):
        bench.claim_variant(_protocol(tmp_path, steps=10), 50)


def test_candidates_are_last_its_trained_weights_and_the_best_validation(tmp_path: Path) -> None:
    import torch

    folder = tmp_path / "seed0" / "train" / "checkpoints"
    folder.mkdir(parents=True)
    averaged, trained = {"w": torch.zeros(2)}, {"w": torch.ones(2)}
    checkpoint = {"state_dict": averaged, "current_model_state": trained, "ocr_config": {"a": 1}}
    torch.save(checkpoint, folder / "last.ckpt")
    torch.save({"state_dict": averaged, "ocr_config": {}}, folder / "best_hmean0.9000_epoch03.ckpt")
    found = bench.candidates(folder.parent)
    assert found == {
        "kept": folder / "last.ckpt",
        "raw": tmp_path / "seed0" / "raw_last.ckpt",
        "best_val": folder / "best_hmean0.9000_epoch03.ckpt",
    }
    raw = torch.load(found["raw"], weights_only=True)
    assert torch.equal(raw["state_dict"]["w"], trained["w"]) and "current_model_state" not in raw
    assert raw["ocr_config"] == {"a": 1}
    torch.save({"state_dict": trained, "ocr_config": {}}, folder / "last.ckpt")  # no weight average
    assert set(bench.candidates(folder.parent)) == {"kept", "best_val"}
    (folder / "last.ckpt").unlink()
    with pytest.raises(FileNotFoundError, match="no last.ckpt"):
        bench.candidates(folder.parent)


def test_a_finished_fine_tune_is_scored_again_without_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands: list[list[str]] = []

    def run(command: list[str], log_path: Path, stdin: str | None = None) -> str:
        commands.append(command)
        return '{"hmean": 0.9, "precision": 0.9, "recall": 0.9}'

    monkeypatch.setattr(bench, "_run", run)
    monkeypatch.setattr(bench, "candidates", lambda run_dir: {"kept": run_dir / "checkpoints" / "last.ckpt"})
    protocol = _protocol(tmp_path, candidates=("kept",))
    first = bench.run_seed(protocol, tmp_path / "data", 0)
    trained_file = protocol.out / "seed0" / bench.TRAINED
    assert commands[0][1] == "runners/train.py" and trained_file.is_file()
    (protocol.out / "seed0" / bench.FIGURES).unlink()  # e.g. another variant's eval overrides: scored anew
    commands.clear()
    again = bench.run_seed(protocol, tmp_path / "data", 0)
    assert [c[1] for c in commands] == ["runners/predict.py", "runners/evaluate.py", "runners/evaluate.py"]
    assert again.train_seconds == first.train_seconds and again.scores == first.scores
    assert again.commands[0] == first.commands[0]  # the fine-tune's command stays on record
