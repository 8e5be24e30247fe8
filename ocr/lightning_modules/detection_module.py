"""DetectionModule: wires the DBNet network, DBLoss, post-processing and CLEval into Lightning."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import numpy as np
import torch
from lightning import LightningModule
from lightning.fabric.utilities.seed import _collect_rng_states, _set_rng_states
from lightning.pytorch.utilities.types import OptimizerLRSchedulerConfig
from torch import Tensor, nn
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler
from torchmetrics.aggregation import MeanMetric

from ocr.evaluation.host_work import ImageOutcome
from ocr.evaluation.pipeline import EvalPipeline, PipelineSettings
from ocr.lightning_modules.prob_cache import ProbCache
from ocr.machine.sync import sync_allowed
from ocr.models.postprocess import DBPostProcessor
from ocr.types import Batch, DBOutput

__all__ = ["DetectionModule", "add_scores"]

log = logging.getLogger(__name__)


def add_scores(batches: Sequence[Sequence[ImageOutcome]], metric: Any) -> None:
    """Add the CLEval counts of scored outcomes to ``metric``, one addition per batch as they came."""
    for outcomes in batches:
        metric.add_results([o.cleval for o in outcomes if o.cleval is not None])


class DetectionModule(LightningModule):
    """Training, evaluation and prediction for a DBNet-family detector, on batches the datamodule decoded.

    ``optimizer`` and ``scheduler`` are partials (the scheduler gets ``horizon``, the run's planned steps);
    ``compile`` marks the batch dimension dynamic, so training and evaluation compile one graph each;
    ``pipeline`` runs post-processing and scoring overlapped with the network.
    """

    def __init__(
        self,
        *,
        net: nn.Module,
        loss: nn.Module,
        postprocess: DBPostProcessor,
        metric: Any,
        optimizer: Callable[..., Optimizer],
        scheduler: Callable[..., LRScheduler],
        channels_last: bool,
        compile: bool,
        pipeline: PipelineSettings,
    ) -> None:
        super().__init__()
        self.net = net
        self.loss = loss
        self.postprocess = postprocess
        self.pipeline = EvalPipeline(settings=pipeline, postprocess=postprocess)
        self.val_metric = metric
        self.test_metric = metric.clone()
        # The evaluation loss as a DDP-safe weighted mean (float sums over ranks): Lightning's own synced
        # mean divides an integer image count by the ranks, which is wrong when they hold unequal shares.
        self.eval_losses = nn.ModuleDict({s: MeanMetric(nan_strategy="disable") for s in ("val", "test")})
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        self.channels_last = channels_last
        self.compile_net = compile  # not `self.compile`: that would hide nn.Module.compile
        self._compiled_net: Callable[[Tensor], DBOutput] | None = None
        self.run_config: dict[str, Any] | None = None
        self._sanitation: Counter[str] = Counter()
        self._crops_seen = 0
        self._crops_with_text: Tensor | None = None  # a device counter, read once per epoch
        # Set by runners/test.py: evaluation reads the network's output from disk where it can.
        self.prob_cache: ProbCache | None = None

    def setup(self, stage: str) -> None:
        if self.channels_last:
            self.net.to(memory_format=torch.channels_last)
        if self.compile_net and self._compiled_net is None:
            # Kept outside the module tree, so state_dict keys stay `net.*` (no `_orig_mod.`).
            object.__setattr__(self, "_compiled_net", torch.compile(self.net))
            torch._logging.set_logs(recompiles=True)

    def forward(self, images: Tensor) -> DBOutput:
        if self.channels_last:  # the datamodule decodes batches in the default layout; a no-op when given
            images = images.contiguous(memory_format=torch.channels_last)
        if self._compiled_net is None:  # `or` would call len()
            return self.net(images)
        torch._dynamo.maybe_mark_dynamic(images, 0)
        return self._compiled_net(images)

    def training_step(self, batch: Batch, batch_idx: int) -> Tensor:
        losses = self.loss(self(batch["images"]), batch)
        self._sanitation.update(batch["sanitation"])
        self._count_text_crops(batch)
        batch_size = batch["images"].shape[0]
        self.log_dict({f"train/{k}": v for k, v in losses.items()}, on_epoch=False, batch_size=batch_size)
        self.log(
            "train/loss_epoch",
            losses["loss"],
            on_step=False,
            on_epoch=True,
            prog_bar=True,
            batch_size=batch_size,
            sync_dist=True,  # the mean over every rank's batches: one all-reduce per epoch
        )
        return losses["loss"]

    def on_train_epoch_end(self) -> None:
        if self._sanitation:
            reasons = ", ".join(f"{k}={v}" for k, v in sorted(self._sanitation.items()))
            log.info("Polygon sanitation, train epoch %d: %s", self.current_epoch, reasons)
        self._sanitation.clear()
        if self._crops_seen and self._crops_with_text is not None:
            with sync_allowed():
                with_text = int(self._crops_with_text)  # the one host sync of this count per epoch
            if with_text < self._crops_seen / 2:
                log.warning(
                    "Train epoch %d: only %d of %d crops held trainable text, so the detector sees "
                    "little or nothing to learn. Text is masked when its shorter side is below "
                    "data.targets.min_text_size px at training scale (data.train_transform.train_long_side "
                    "x scale_range) or falls outside the crop (crop_size, p_text_crop).",
                    self.current_epoch,
                    with_text,
                    self._crops_seen,
                )
        self._crops_seen, self._crops_with_text = 0, None

    def _count_text_crops(self, batch: Batch) -> None:
        """Count the crops with at least one trainable text pixel, without a host-device sync."""
        trainable = (batch["prob_map"] * batch["prob_mask"]).flatten(1).amax(1) > 0
        count = trainable.sum()
        self._crops_with_text = count if self._crops_with_text is None else self._crops_with_text + count
        self._crops_seen += int(trainable.shape[0])

    # Outcomes reach the metric, the report and the kept predictions through the pipeline, a batch or
    # two after their step (the steps return nothing).
    def on_validation_epoch_start(self) -> None:
        self.pipeline.start(device=self.device, cleval=self.val_metric.options, keep_predictions=False)

    def validation_step(self, batch: Batch, batch_idx: int) -> None:  # type: ignore[override]
        self._evaluate_step(batch, "val", self.val_metric)

    def on_validation_epoch_end(self) -> None:
        self._end_evaluation("val", self.val_metric)

    def on_test_epoch_start(self) -> None:
        self.pipeline.start(device=self.device, cleval=self.test_metric.options, keep_predictions=False)

    def test_step(self, batch: Batch, batch_idx: int) -> None:  # type: ignore[override]
        self._evaluate_step(batch, "test", self.test_metric)

    def on_test_epoch_end(self) -> None:
        self._end_evaluation("test", self.test_metric)

    def on_predict_epoch_start(self) -> None:
        self.pipeline.start(device=self.device, cleval=None, keep_predictions=True)

    def predict_step(self, batch: Batch, batch_idx: int) -> None:
        self.pipeline.begin_step()
        with self.pipeline.network(self.device):
            prob_logits = self(batch["images"]).prob_logits
        self.pipeline.submit_logits(prob_logits, batch, scored=False)

    def on_predict_epoch_end(self) -> None:
        self.pipeline.finish()

    def teardown(self, stage: str) -> None:
        self.pipeline.close()

    def _evaluate_step(self, batch: Batch, stage: str, metric: Any) -> None:
        """Loss (logged; not with a ``prob_cache``, whose outputs have no threshold maps) and the batch
        handed to the pipeline; the metric gets the scores of the batches done so far."""
        self.pipeline.begin_step()
        with self.pipeline.network(self.device):
            if self.prob_cache is not None:
                prob_logits = self.prob_cache.prob_logits(batch, lambda images: self(images).prob_logits)
            else:
                output = self(batch["images"])
                losses = self.loss(output, batch)
                loss_mean = cast(MeanMetric, self.eval_losses[stage])
                loss_mean.update(losses["loss"].detach(), batch["images"].shape[0])
                self.log(f"{stage}/loss", loss_mean, on_epoch=True, batch_size=batch["images"].shape[0])
                prob_logits = output.prob_logits
        add_scores(self.pipeline.submit_logits(prob_logits, batch, scored=True), metric)

    def _end_evaluation(self, stage: str, metric: Any) -> None:
        add_scores(self.pipeline.finish(), metric)  # the batches still in the pipeline
        # compute() gathers every rank's counts, so each rank scores the whole split; the max over ranks
        # makes the logged value one number everywhere (exact, unlike a mean), so no rank can pick another
        # best checkpoint, stop early at another epoch or re-plan the time budget from another score.
        scores: Mapping[str, Tensor] = metric.compute()
        for name in ("hmean", "precision", "recall"):
            self.log(
                f"{stage}/{name}", scores[name], prog_bar=name == "hmean", sync_dist=True, reduce_fx="max"
            )
        metric.reset()

    def configure_optimizers(self) -> OptimizerLRSchedulerConfig:
        optimizer = self.optimizer_factory(params=self.parameters())
        scheduler = self.scheduler_factory(optimizer=optimizer, horizon=self._planned_steps)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def _planned_steps(self) -> int:
        """The schedule's horizon: the run's optimizer steps as planned now (the time budget may cut it)."""
        estimated = self.trainer.estimated_stepping_batches
        if not np.isfinite(estimated) or estimated <= 0:
            raise ValueError(
                f"scheduler: cannot size the schedule, estimated_stepping_batches={estimated}; "
                "set trainer.max_steps or trainer.max_epochs"
            )
        return int(estimated)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # Lightning restores model/optimizer/scheduler/loops on resume; RNG states are ours to keep.
        checkpoint["rng_states"] = _collect_rng_states()
        if self.run_config is not None:
            checkpoint["ocr_config"] = self.run_config

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if "rng_states" in checkpoint:
            _set_rng_states(checkpoint["rng_states"])
