"""Resume a run: its own config from the checkpoint, only the command line's key overrides on top.

``runners/train.py resume=<run dir>`` continues in that directory from its latest checkpoint (or
``ckpt_path``) with the resolved config stored in it, so neither a changed default nor ``hardware=auto``
on another machine changes it behind the user's back. A refused resume has written nothing.
"""

from __future__ import annotations

import json
import logging
import pickle
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from ocr.checkpoints.reading import load_checkpoint, load_checkpoint_file
from ocr.utils.errors import RunRefusedError

__all__ = [
    "CONTROL_KEYS",
    "Resume",
    "ResumeRefusedError",
    "START_AGAIN",
    "find_checkpoint",
    "refuse_file_resume",
    "resume_from_command_line",
    "resume_run",
]

log = logging.getLogger(__name__)

# Keys that steer this invocation rather than describe the run: always taken from the command line.
CONTROL_KEYS = (
    "resume",
    "ckpt_path",
    "resume_allow_data_change",
    "resume_allow_other_run",
    "resume_allow_world_size_change",
)
# Config groups a resume cannot change: what the checkpoint restores would silently override them.
FIXED_ON_RESUME = {
    "model": "the checkpoint's weights are those of the run's network",
    "optimizer": "the optimizer's state, its learning rate included, is restored from the checkpoint",
}
_ABSENT = object()
# The one way out for a run folder without a checkpoint, said by a resume and by a new run alike.
START_AGAIN = (
    "start the run again in a new folder (leave out hydra.run.dir, or choose another), or delete {run_dir} "
    "and start it there"
)


class ResumeRefusedError(RunRefusedError, ValueError):
    """A resume refused before it changed anything (an override that does not fit, another output
    directory, another run's checkpoint, changed data): the run directory keeps its status."""


@dataclass(frozen=True)
class Resume:
    """What a resumed run starts from."""

    checkpoint: Path
    step: int
    config: DictConfig
    overrides: list[str]
    data_fingerprint: str | None
    run_id: str | None  # the run the checkpoint belongs to, when it is this run (None: not recorded)
    world_size: int | None = None  # processes of the run that wrote the checkpoint
    summary: str = ""  # what resumes from where, logged once the run folder is claimed

    @property
    def config_name(self) -> str:
        """The resumed config's file name; the run's original ``config.yaml`` is kept."""
        return f"config.resumed-step{self.step}.yaml"

    @property
    def header(self) -> str:
        """Comment lines for the resumed config file: where it resumed from, and the overrides."""
        return f"# resumed from {self.checkpoint}; overrides: {' '.join(self.overrides) or 'none'}\n"

    def check_data(self, datamodule: Any, allow_change: bool) -> None:
        """Refuse to go on when the data fingerprint (of the annotation files, so the data is prepared first)
        differs from the checkpoint's, unless ``allow_change``."""
        datamodule.prepare_data()
        current = datamodule.fingerprint
        if self.data_fingerprint is None:
            log.warning("Resume: %s records no data fingerprint; the data cannot be checked", self.checkpoint)
            return
        if current == self.data_fingerprint:
            return
        message = (
            f"resume: the data changed since {self.checkpoint} was written: data fingerprint "
            f"{self.data_fingerprint} then, {current} now (sha256 of the split annotation files under "
            f"data.root={datamodule.root})"
        )
        if allow_change:
            log.warning("%s; going on <resume_allow_data_change=true>", message)
            return
        raise ResumeRefusedError(
            f"{message}. Resume on the original data, or pass resume_allow_data_change=true"
        )


def _checkpoint_step(path: Path) -> int:
    meta = Path(f"{path}.json")
    if meta.is_file():
        # The JSON is written after the checkpoint's rename: one older than its checkpoint is a previous
        # save's (killed between the two writes).
        if meta.stat().st_mtime < path.stat().st_mtime:
            log.warning("Resume: %s is older than its checkpoint; reading the step from the checkpoint", meta)
        else:
            try:
                return int(json.loads(meta.read_text())["global_step"])
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning(
                    "Resume: cannot read the step from %s (%s: %s); reading it from the checkpoint",
                    meta,
                    type(exc).__name__,
                    exc,
                )
    # Killed between the rename and the JSON: the checkpoint itself is complete (else named as truncated).
    return int(load_checkpoint_file(path, "checkpoint", mmap=True)["global_step"])


def find_checkpoint(run_dir: Path, ckpt_path: str | None) -> tuple[Path, int]:
    """``ckpt_path`` when given, else the checkpoint of highest step (``last.ckpt`` on a tie) in
    ``<run_dir>/checkpoints`` or a SLURM pre-emption's ``<run_dir>/hpc_ckpt_<n>.ckpt``; with its step."""
    if ckpt_path is not None:
        path = Path(ckpt_path)
        if not path.is_file():
            raise FileNotFoundError(f"ckpt_path={ckpt_path}: no such checkpoint file")
        return path, _checkpoint_step(path)
    folder = run_dir / "checkpoints"
    candidates = sorted(folder.glob("*.ckpt")) if folder.is_dir() else []
    # SLURM auto-requeue (docs/distributed.md): Lightning writes its checkpoint in the system's temp folder
    # and moves it here, a copy across file systems: one the job's end cut short is skipped.
    for path in sorted(run_dir.glob("hpc_ckpt_*.ckpt")):
        try:
            _checkpoint_step(path)
        except (RuntimeError, OSError, EOFError, ValueError, KeyError, pickle.UnpicklingError) as exc:
            log.warning("Resume: skipping %s, which cannot be read (%s: %s)", path, type(exc).__name__, exc)
            continue
        candidates.append(path)
    if not candidates:
        raise FileNotFoundError(
            f"resume={run_dir}: no checkpoint (*.ckpt) in {folder}; a run killed before or during its "
            f"first checkpoint write has nothing to resume: {START_AGAIN.format(run_dir=run_dir)}"
        )
    steps = {path: _checkpoint_step(path) for path in candidates}
    picked = max(candidates, key=lambda p: (steps[p], p.name == "last.ckpt"))
    found = ", ".join(f"{p.name} (step {s})" for p, s in sorted(steps.items(), key=lambda i: -i[1]))
    log.info("Resume: picked %s, the latest of %s", picked, found)
    return picked, steps[picked]


def _rebase(value: Any, old: str, new: str) -> Any:
    if isinstance(value, dict):
        return {k: _rebase(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_rebase(v, old, new) for v in value]
    if isinstance(value, str) and (value == old or value.startswith(old + "/")):
        return new + value[len(old) :]
    return value


def _apply_overrides(run_cfg: DictConfig, composed: DictConfig, overrides: Sequence[str]) -> list[str]:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    applied = []
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        key = override.key_or_group
        if key in CONTROL_KEYS:
            continue
        value = _ABSENT if override.is_delete() else OmegaConf.select(composed, key, default=_ABSENT)
        if value is _ABSENT or isinstance(value, DictConfig):
            raise ResumeRefusedError(
                f"resume: cannot apply '{override.input_line}' to the resumed run's own config: a resumed "
                "run keeps its config, and only single keys can be overridden (e.g. trainer.max_steps=400); "
                "config groups (data=..., hardware=...) and deletions are refused"
            )
        adding = override.is_add() or override.is_force_add()
        parent_key, _, leaf = key.rpartition(".")
        parent = OmegaConf.select(run_cfg, parent_key) if parent_key else run_cfg
        if not adding and not (isinstance(parent, DictConfig) and leaf in parent):
            raise ResumeRefusedError(
                f"resume: '{override.input_line}': the run's config has no key {key} (it was written by an "
                "older version, or the key is misspelled)"
            )
        if isinstance(value, ListConfig):
            value = OmegaConf.to_container(value, resolve=True)
        _check_fixed_key(run_cfg, key, value, str(override.input_line))
        with open_dict(run_cfg):
            OmegaConf.update(run_cfg, key, value, force_add=adding)
        applied.append(str(override.input_line))  # None only for overrides not parsed from text
    return applied


def _check_fixed_key(run_cfg: DictConfig, key: str, value: Any, override: str) -> None:
    """Refuse ``override`` when it changes a key of :data:`FIXED_ON_RESUME` (naming both values)."""
    group = key.split(".", 1)[0]
    if group not in FIXED_ON_RESUME:
        return
    current = OmegaConf.select(run_cfg, key, default=_ABSENT)
    if isinstance(current, DictConfig | ListConfig):
        current = OmegaConf.to_container(current, resolve=True)
    if current == value:
        return
    was = "not set" if current is _ABSENT else repr(current)
    raise ResumeRefusedError(
        f"resume: '{override}' changes {key} ({was} in the run's config): {FIXED_ON_RESUME[group]}, so a "
        f"resumed run cannot change {group}.*. Start a new run for it (model.init_from=<checkpoint> starts "
        "from these weights with a fresh optimizer)"
    )


def _check_same_run(
    run_dir: Path, folder_id: str | None, checkpoint_path: Path, run_config: dict[str, Any], allow: bool
) -> bool:
    """Whether the checkpoint belongs to the run in ``run_dir`` (by run identity when both record one, else
    by where the file lies); another run's is refused unless ``allow``."""
    checkpoint_id = run_config.get("run_id")
    if folder_id is not None and checkpoint_id is not None:
        same = folder_id == checkpoint_id
    else:
        same = run_dir in checkpoint_path.resolve().parents
    if same:
        return True
    written_in = run_config.get("paths", {}).get("output_dir", "an unknown folder")
    message = (
        f"resume={run_dir} with ckpt_path={checkpoint_path}: the checkpoint belongs to another run, "
        f"{checkpoint_id or '(no run id recorded)'} written in {written_in}; this folder holds run "
        f"{folder_id or '(no run id recorded)'}"
    )
    if allow:
        log.warning(
            "%s; going on <resume_allow_other_run=true>: this run continues from that checkpoint's state "
            "and config",
            message,
        )
        return False
    raise ResumeRefusedError(
        f"{message}. Resume that run in its own folder (resume=<its folder>), start a new run from its "
        "weights (model.init_from=<checkpoint>), or pass resume_allow_other_run=true to continue this run "
        "from it"
    )


def refuse_file_resume(resume: str | None) -> None:
    """Refuse ``resume=<a checkpoint file>``, naming the run folder it lies in and ``ckpt_path``."""
    if resume is None or not Path(resume).is_file():
        return
    path = Path(resume).resolve()
    folder = path.parent.parent if path.parent.name == "checkpoints" else path.parent
    raise ResumeRefusedError(
        f"resume={resume} is a file; resume takes the run's folder: resume={folder} (add ckpt_path={resume} "
        "to continue from this checkpoint)"
    )


def _refuse_nothing_to_train(
    cfg: DictConfig, checkpoint: dict[str, Any], checkpoint_path: Path, step: int, run_dir: Path
) -> None:
    """Refuse a resume whose length is already reached (it would only test again and rewrite the run's
    ``metrics.json`` and status), naming the step (or epoch), the length and the override that trains."""
    max_steps = OmegaConf.select(cfg, "trainer.max_steps", default=-1)
    max_epochs = OmegaConf.select(cfg, "trainer.max_epochs", default=None)
    if isinstance(max_steps, int) and max_steps >= 0:
        if step < max_steps:
            return
        reached = f"the run is at step {step} and trainer.max_steps={max_steps}"
        more = f"trainer.max_steps={max(2 * step, step + 1)}"
    else:
        try:  # Lightning's loop state: epochs the fit loop had completed
            epochs = int(checkpoint["loops"]["fit_loop"]["epoch_progress"]["current"]["completed"])
        except (KeyError, TypeError, ValueError):
            epochs = None
        if not isinstance(max_epochs, int) or max_epochs < 0 or epochs is None or epochs < max_epochs:
            return
        reached = f"the run has completed {epochs} epoch(s) and trainer.max_epochs={max_epochs}"
        more = f"trainer.max_epochs={max(2 * epochs, epochs + 1)}"
    raise ResumeRefusedError(
        f"resume={run_dir}: nothing to train, {reached} ({checkpoint_path.name}). Train further with a "
        f"longer run, e.g. resume={run_dir} {more}, or score it without resuming: uv run runners/test.py "
        f"ckpt={checkpoint_path}"
    )


def resume_run(composed: DictConfig, overrides: Sequence[str], folder_id: str | None) -> Resume:
    """The run's own config (from its checkpoint) with this invocation's key ``overrides`` applied, and the
    checkpoint (``folder_id``: the folder's run identity); FileNotFoundError: no checkpoint."""
    run_dir = Path(composed.resume).resolve()
    refuse_file_resume(composed.resume)
    if not run_dir.is_dir() or not any(run_dir.iterdir()):  # empty: the folder Hydra made for this run
        raise ResumeRefusedError(f"resume={composed.resume}: no such run directory ({run_dir})")
    output_dir = Path(composed.paths.output_dir).resolve()
    if output_dir != run_dir:
        raise ResumeRefusedError(
            f"resume={composed.resume} continues in that directory, but the output directory is "
            f"{output_dir} (hydra.run.dir or paths.output_dir): drop that override"
        )
    checkpoint_path, step = find_checkpoint(run_dir, composed.ckpt_path)
    checkpoint = load_checkpoint(checkpoint_path)
    run_config = checkpoint["ocr_config"]
    same_run = _check_same_run(
        run_dir, folder_id, checkpoint_path, run_config, composed.resume_allow_other_run
    )
    saved_dir = str(run_config["paths"]["output_dir"])
    if Path(saved_dir).resolve() != run_dir:
        log.warning("Resume: the run was written in %s; its paths now point to %s", saved_dir, run_dir)
        run_config = _rebase(run_config, saved_dir.rstrip("/"), str(run_dir))
    cfg = OmegaConf.create(run_config)
    applied = _apply_overrides(cfg, composed, overrides)
    _refuse_nothing_to_train(cfg, checkpoint, checkpoint_path, step, run_dir)
    with open_dict(cfg):
        for key in CONTROL_KEYS:
            cfg[key] = composed[key]
        csv_logger = OmegaConf.select(cfg, "logger.csv")
        if isinstance(csv_logger, DictConfig) and "version" in csv_logger:
            # Lightning's CSVLogger deletes an existing metrics.csv: keep the run's and log beside it.
            csv_logger.version = f"resumed-step{step}"
            log.info("Resume: metrics go to csv/%s/ (the run's csv/metrics.csv is kept)", csv_logger.version)
    OmegaConf.set_struct(cfg, True)
    fingerprint = checkpoint.get("data_fingerprint")
    summary = (
        f"Resuming {run_dir} from {checkpoint_path.name} (epoch {checkpoint.get('epoch')}, step {step}) with "
        f"the run's own config; command-line overrides applied: {', '.join(applied) or 'none'}"
    )
    run_id = run_config.get("run_id") if same_run else None
    world_size = checkpoint.get("world_size")
    return Resume(checkpoint_path, step, cfg, applied, fingerprint, run_id, world_size, summary)


def resume_from_command_line(cfg: DictConfig, folder_id: str | None) -> Resume | None:
    """The resume ``cfg`` asks for (``resume=<run dir>``, optional ``ckpt_path``; ``folder_id``: the
    folder's run identity), or None; refuses ``ckpt_path`` without ``resume`` and ``model.init_from`` with
    it."""
    if cfg.ckpt_path is not None and cfg.resume is None:
        raise ValueError(
            f"ckpt_path={cfg.ckpt_path} needs the run to resume: pass resume=<run dir> (its own config "
            "and directory are restored; ckpt_path then picks the checkpoint, default the latest)"
        )
    if cfg.resume is None:
        return None
    init_from = OmegaConf.select(cfg, "model.init_from")
    if init_from is not None:
        raise ResumeRefusedError(
            f"resume={cfg.resume} with model.init_from={init_from}: a resume restores the run's weights, "
            "optimizer and schedule from its checkpoint; drop model.init_from to resume, or drop resume "
            "to start a new run from those weights"
        )
    from hydra.core.hydra_config import HydraConfig

    # Without a Hydra run (a test composing the config) there is no command line.
    overrides = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
    return resume_run(cfg, overrides, folder_id)
