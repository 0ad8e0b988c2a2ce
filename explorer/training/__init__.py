"""Training: one loop for every method, its schedule, checkpoints, logs and data interface.

    from explorer.training import TrainConfig, init_from, train
    model, report = init_from("finelip", "checkpoints/longclip-B.pt")   # or init_from("clip") from scratch
    result = train(model, samples, TrainConfig(epochs=2), "checkpoints/finelip-run", init=report)

Modules: ``loop`` (train, TrainConfig, TrainResult), ``schedule`` (warm-up +
cosine), ``optimizer`` (AdamW groups, weight-decay rule), ``samples`` (samples,
BatchSource, SampleLoader, SampleFolder), ``checkpointing`` (run folder,
resume), ``metrics_log`` (JSONL), ``warm_start`` (init_from), ``launch`` (the
``explorer train`` command). Names are imported lazily, so building the
command-line parser does not import torch.
"""

from __future__ import annotations

from explorer.core.lazy import lazy_exports

_EXPORTS = {
    "train": "loop", "TrainConfig": "config", "TrainResult": "loop", "TrainingError": "loop",
    "as_batch_source": "loop",
    "WarmupCosine": "schedule", "build_scheduler": "schedule",
    "build_adamw": "optimizer", "optimizer_groups": "optimizer", "no_decay_names": "optimizer",
    "TrainingSample": "samples", "BatchSource": "samples", "SampleLoader": "samples", "BatchList": "samples",
    "SampleFolder": "samples", "collate": "samples",
    "JsonlLog": "metrics_log", "read_jsonl": "metrics_log", "METRIC_FIELDS": "metrics_log",
    "init_from": "warm_start", "InitReport": "warm_start",
    "latest_checkpoint": "checkpointing",
    "train_from_args": "launch", "add_train_arguments": "launch", "run_train_command": "launch",
}


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
