"""The one place that instantiates the network, loss, metric and the DetectionModule from a run config."""

from __future__ import annotations

import copy

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict
from torch import nn

from ocr.checkpoints.init_from import load_init_weights
from ocr.lightning_modules.detection_module import DetectionModule
from ocr.metrics.cleval.metric import CLEvalMetric

__all__ = ["build_metric", "build_module", "build_net_and_loss"]


def build_net_and_loss(cfg: DictConfig, *, weights_free: bool = False) -> tuple[nn.Module, nn.Module]:
    """The network of ``cfg.model`` (from ``model.init_from`` when set) and the loss of ``cfg.loss``;
    ``weights_free`` builds random weights (no download, no weights file), for a caller that loads a
    checkpoint's weights or only measures memory."""
    # Absent from run configs stored before it existed. A recipe's required value that was not given
    # (experiment=receipts_finetune) fails naming it, except where no weights are loaded.
    init_from = OmegaConf.select(
        cfg,
        "model.init_from",
        default=None,
        throw_on_missing=not weights_free,
        throw_on_resolution_failure=not weights_free,
    )
    model_cfg = copy.deepcopy(cfg.model)
    with open_dict(model_cfg):
        if "init_from" in model_cfg.keys():  # not a DBNet argument (keys(): `in` skips a `???`)
            del model_cfg["init_from"]  # unlike pop, del resolves nothing
        if weights_free:
            model_cfg.encoder.pretrained = False
            model_cfg.encoder.weights_path = None
    net = instantiate(model_cfg)
    if init_from is not None and not weights_free:
        load_init_weights(net, init_from)
    return net, instantiate(cfg.loss)


def build_metric(metric_cfg: DictConfig) -> CLEvalMetric:
    """CLEval with the options of ``metric_cfg`` (configs/metric/cleval.yaml builds a ``CLEvalOptions``)."""
    return CLEvalMetric(options=instantiate(metric_cfg))


def build_module(cfg: DictConfig, *, weights_free: bool = False) -> DetectionModule:
    """The DetectionModule of a run config (``cfg.module``, with network, loss, post-processing, pipeline,
    metric, optimizer and scheduler from their groups); ``weights_free`` as in :func:`build_net_and_loss`."""
    net, loss = build_net_and_loss(cfg, weights_free=weights_free)
    return instantiate(
        cfg.module,
        net=net,
        loss=loss,
        postprocess=instantiate(cfg.postprocess),
        pipeline=instantiate(cfg.pipeline),
        metric=build_metric(cfg.metric),
        optimizer=instantiate(cfg.optimizer),
        scheduler=instantiate(cfg.scheduler),
    )
