"""A training run's settings: ``TrainConfig`` (no torch here: the Jobs tab and the CLI read its defaults
before torch is imported). ``explorer.training.loop`` trains with it."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from explorer.core.errors import ConfigError

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
# Fields that may change when a run is resumed; any other change would make it another run.
RESUMABLE_CHANGES = frozenset({"device", "precision", "checkpoint_every", "checkpoint_minutes", "keep_checkpoints", "log_every",
                               "workers", "command"})


@dataclass
class TrainConfig:
    epochs: int | None = 1  # passes over the data; ignored when max_steps is set
    max_steps: int | None = None  # optimizer steps in all (the schedule's length)
    batch_size: int = 32  # samples per micro-batch when the dataset is a sequence of samples
    lr_backbone: float = 1e-5  # the CLIP towers the method starts from
    lr_new: float = 1e-4  # modules the method adds (method.new_module_prefixes)
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-6
    warmup_steps: int = 0
    warmup_ratio: float = 0.0  # or a share of the run (not both)
    min_lr_ratio: float = 0.0  # the cosine ends at this share of each base rate
    accumulate: int = 1  # micro-batches per optimizer step
    clip_grad_norm: float | None = 1.0  # None or 0: no clipping
    precision: str = "auto"  # auto (bf16 on CUDA if supported, else fp16; fp32 on CPU), fp32, bf16, fp16
    device: str = "auto"  # auto picks CUDA when available
    seed: int = 0
    checkpoint_every: int = 0  # optimizer steps between checkpoints; 0: only at the end
    checkpoint_minutes: float = 0.0  # also a checkpoint once this much wall time passed since the last; 0: off
    keep_checkpoints: int = 1  # resumable checkpoints kept on disk
    log_every: int = 1
    shuffle: bool = True
    workers: int = 0  # data worker processes (SampleLoader)
    name: str | None = None  # the zoo name; default: the out folder's name
    command: str = ""  # what launched the run, for the manifest's "source"

    def __post_init__(self):
        if self.precision not in PRECISIONS:
            raise ConfigError(f"precision must be one of {PRECISIONS}, not {self.precision!r}")
        if self.accumulate < 1 or self.batch_size < 1 or self.log_every < 1:
            raise ConfigError("accumulate, batch_size and log_every must be at least 1")
        if self.max_steps is None and (self.epochs is None or self.epochs < 1):
            raise ConfigError("give epochs >= 1 or max_steps")
        if self.max_steps is not None and self.max_steps < 1:
            raise ConfigError(f"max_steps must be at least 1, got {self.max_steps}")
        if self.warmup_steps and self.warmup_ratio:
            raise ConfigError("give warmup_steps or warmup_ratio, not both")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ConfigError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        self.betas = tuple(self.betas)

    def to_dict(self) -> dict:
        return asdict(self)
