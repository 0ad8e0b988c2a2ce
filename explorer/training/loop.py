"""One training loop for every method.

    model, report = init_from("finelip", "longclip-B.pt")
    result = train(model, samples, TrainConfig(epochs=3, batch_size=64), "checkpoints/finelip-synth", init=report)
    explorer.load(result.manifest)

A method supplies ``losses(batch)`` (named, already weighted terms; ``batch.extras`` carries
"step", the optimizer step being taken, and "epoch", both from 0) and ``parameter_groups()``;
the loop minimises the sum of the terms with

- AdamW, per-group learning rates (``lr_backbone``, ``lr_new``), no weight
  decay on biases, norms, embeddings and temperatures (optimizer.py);
- linear warm-up, then cosine decay (schedule.py), stepped per optimizer step;
- gradient accumulation: ``accumulate`` micro-batches per optimizer step, each
  micro-batch's loss weighted by its share of the window's samples, so for a
  loss that is a mean over samples the step equals one on the concatenated
  batch (contrastive losses see the negatives of their own micro-batch only);
- gradient clipping on the total norm (the norm before clipping is logged);
- mixed precision on CUDA: autocast in bf16 (or fp16 with a GradScaler) over
  fp32 weights; plain fp32 on CPU;
- checkpoints written atomically every ``checkpoint_every`` steps and at the
  end, each also published to the zoo as ``<out>/<name>.json`` (checkpointing.py);
- exact resume from the newest checkpoint: weights, optimizer, scheduler,
  grad scaler, step, RNG states, and the data order (batches are fixed by the
  epoch number, so the resumed run sees the batches the uninterrupted one
  would have);
- ``metrics.jsonl`` and ``run.jsonl`` (metrics_log.py), a tqdm bar, seeds recorded;
- a clean stop on request: ``should_stop()`` is asked before every optimizer step; when it
  says yes the run saves a checkpoint (unless one is on disk for that step), logs a "stop"
  event and returns with ``result.stopped`` set; ``resume=True`` continues it exactly
  (background jobs map SIGTERM to this, ``explorer.jobs``).

The run is seeded with ``seed`` (Python, numpy, torch) when it starts fresh.

Many processes: launched by ``torchrun --nproc_per_node N`` (or inside a process group the caller
set up) the same call trains with DDP, ``batch_size`` per rank and every loss over the global
batch; only rank 0 writes (ddp.py says how).
"""

from __future__ import annotations

import contextlib
import math
import random
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np
import torch

from explorer.core.errors import ExplorerError
from explorer.models.model import resolve_device
from explorer.training import ddp
from explorer.training.checkpointing import (WEIGHTS_FILE, capture_rng, checkpoint_folder_name, latest_checkpoint,
                                             load_checkpoint, manifest_name, restore_rng, save_checkpoint,
                                             write_manifest)
from explorer.training.config import PRECISIONS, RESUMABLE_CHANGES, TrainConfig  # noqa: F401 (re-exported)
from explorer.training.metrics_log import METRICS_FILE, RUN_LOG_FILE, JsonlLog
from explorer.training.optimizer import build_adamw, group_lrs
from explorer.training.samples import BatchSource, SampleLoader
from explorer.training.schedule import WarmupCosine, build_scheduler

if TYPE_CHECKING:  # warm_start imports the method modules (open_clip): not needed to read TrainConfig
    from explorer.training.warm_start import InitReport

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class TrainingError(ExplorerError):
    """A run cannot start, continue or finish (with what to do about it)."""


@dataclass
class TrainResult:
    out_dir: Path
    manifest: Path  # <out>/<name>.json: explorer.load(result.manifest)
    weights: Path  # <out>/model.safetensors
    metrics_path: Path
    run_log_path: Path
    steps: int  # optimizer steps done, in all
    total_steps: int
    resumed_from: int | None  # the step this call started from, when it resumed
    last: dict  # the last metrics row
    history: list[dict] = field(default_factory=list)  # every metrics row of this call
    device: str = "cpu"
    precision: str = "fp32"
    notes: list[str] = field(default_factory=list)
    stopped: bool = False  # should_stop() ended the run before total_steps (a checkpoint holds its state)
    rank: int = 0  # this process's rank under DDP (0: the one that wrote the files)
    world_size: int = 1  # processes that trained together


def resolve_precision(precision: str, device: torch.device, notes: list[str]) -> str:
    if device.type != "cuda":
        if precision in AMP_DTYPES:
            notes.append(f"{precision} asked for on {device.type}: training in fp32")
        return "fp32"
    if precision == "auto":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    return precision


def as_batch_source(dataset, method, config: TrainConfig, ranks: ddp.Ranks | None = None) -> BatchSource:
    """A ``BatchSource`` as it is, or a sequence of samples wrapped in a ``SampleLoader`` for ``method``;
    with ``ranks``, this rank's slice of every global batch (ddp.py)."""
    if isinstance(dataset, BatchSource):
        return dataset if ranks is None else ddp.RankSlices(dataset, ranks.rank, ranks.world)
    if isinstance(dataset, Sequence) or (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
        options = dict(shuffle=config.shuffle, seed=config.seed, workers=config.workers)
        if ranks is not None:
            return ddp.RankSampleLoader(dataset, method.preprocess, config.batch_size, ranks.rank, ranks.world,
                                        **options)
        return SampleLoader(dataset, method.preprocess, config.batch_size, **options)
    raise TypeError(f"train() takes a BatchSource or a sequence of samples, not {type(dataset).__name__}")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds every CUDA device


def train(method, dataset, config: TrainConfig | None, out_dir: str | Path, *, init: InitReport | None = None,
          resume: bool = False, progress: bool = True, on_metrics: Callable[[dict], None] | None = None,
          should_stop: Callable[[], bool] | None = None) -> TrainResult:
    """Train ``method`` on ``dataset`` and publish the result as a zoo entry in ``out_dir``.

    ``dataset``: a ``BatchSource`` or a sequence of samples (samples.py). ``config``: None for
    the defaults of ``TrainConfig``. ``init``: the ``InitReport`` of ``init_from`` (recorded
    with the run). ``resume``: continue the run in ``out_dir`` from its newest checkpoint (an
    error when there is none; and a run folder with a checkpoint is never restarted without
    ``resume``). ``on_metrics(row)`` is called with each logged metrics row, after any
    checkpoint due at that step; an exception from it stops the run, which then resumes
    from its last checkpoint. ``should_stop()`` is asked before every optimizer step (cheap: a
    flag); a yes saves a checkpoint and returns early with ``stopped=True``. The model is left
    on the run's device, in the mode it came in. Under DDP (ddp.py) ``on_metrics`` is called on
    rank 0 only, and a stop asked on any rank stops every rank at the same step.
    """
    was_training = method.training
    config = config or TrainConfig()
    ranks = ddp.setup(config.device)
    try:
        run = _Run(method, dataset, config, Path(out_dir).expanduser(), init, resume, ranks)
    except BaseException:
        method.train(was_training)
        if ranks is not None:
            ranks.close()
        raise
    leader = ranks is None or ranks.leader
    bar = _progress_bar(progress and leader, run.total, run.step, method)
    try:
        run.loop(bar, on_metrics if leader else None, should_stop)
    finally:
        bar.close()
        method.train(was_training)
    if ranks is not None:
        ranks.close()
    return run.result()


class _Run:
    """The state of one call of ``train``: model, optimizer, schedule, counters, logs."""

    def __init__(self, method, dataset, config: TrainConfig, out_dir: Path, init: InitReport | None, resume: bool,
                 ranks: ddp.Ranks | None = None):
        self.method, self.config, self.out_dir, self.ranks = method, config, out_dir, ranks
        self.world = 1 if ranks is None else ranks.world
        self.ddp = None  # the DDP wrapper, made at the first step (ddp.wrap)
        self.notes: list[str] = []
        self.device = resolve_device(config.device) if ranks is None else ranks.device
        self.precision = resolve_precision(config.precision, self.device, self.notes)
        self.source = as_batch_source(dataset, method, config, ranks)
        self.steps_per_epoch = len(self.source) // config.accumulate
        if self.steps_per_epoch < 1:
            raise TrainingError(f"an epoch has {len(self.source)} batch(es), fewer than accumulate="
                                f"{config.accumulate}: no optimizer step would run; use more data, smaller batches "
                                "or less accumulation.")
        self.total = config.max_steps or config.epochs * self.steps_per_epoch
        warmup = config.warmup_steps or int(round(config.warmup_ratio * self.total))
        schedule = WarmupCosine(self.total, min(warmup, self.total), config.min_lr_ratio)
        self.name = manifest_name(out_dir, config.name)

        folder = latest_checkpoint(out_dir) if out_dir.exists() else None
        if folder is not None and not resume:
            raise TrainingError(f"{out_dir} already holds a run (checkpoint {folder.name}); resume it "
                                "(resume=True, --resume) or choose another output folder.")
        if folder is None and resume:
            raise TrainingError(f"Nothing to resume: {out_dir} holds no checkpoint.")

        method.to(self.device)
        method.train()
        saved = None
        if folder is not None:
            saved = load_checkpoint(folder, method)
            _check_same_run(saved.state.get("config", {}), config, folder)
            if int(saved.state.get("world_size", 1)) != self.world:
                raise TrainingError(f"{folder} was trained on {saved.state.get('world_size', 1)} process(es) and "
                                    f"this run has {self.world}: the global batch and the schedule would change. "
                                    "Resume it with the same number of processes.")
        else:
            seed_everything(config.seed)
        self.optimizer = build_adamw(method, {"backbone": config.lr_backbone, "new": config.lr_new},
                                     config.weight_decay, betas=config.betas, eps=config.eps)
        self.scheduler = build_scheduler(self.optimizer, schedule)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.precision == "fp16")
        self.amp = (torch.autocast(device_type=self.device.type, dtype=AMP_DTYPES[self.precision])
                    if self.precision in AMP_DTYPES else contextlib.nullcontext())
        self.parameters = [p for group in self.optimizer.param_groups for p in group["params"]]
        log = JsonlLog if ranks is None or ranks.leader else ddp.SilentLog  # rank 0 writes
        self.metrics, self.run_log = log(out_dir / METRICS_FILE), log(out_dir / RUN_LOG_FILE)
        self.step, self.samples, self.elapsed_before = 0, 0, 0.0
        self.resumed_from, self.stopped = None, False
        if saved is not None:
            self.optimizer.load_state_dict(saved.state["optimizer"])
            self.scheduler.load_state_dict(saved.state["scheduler"])
            if saved.state.get("scaler"):
                self.scaler.load_state_dict(saved.state["scaler"])
            restore_rng(saved.state["rng"])
            self.step = self.resumed_from = saved.step
            self.samples = int(saved.state.get("samples", 0))
            self.elapsed_before = float(saved.state.get("elapsed_s", 0.0))
            dropped = self.metrics.truncate_after_step(self.step)
            if dropped:
                self.notes.append(f"dropped {dropped} metrics row(s) logged after the checkpoint at step {self.step}")
        # where the weights started: this call's init, else what the resumed run recorded
        self.init_source = init.source if init is not None else (saved.state.get("init_source") if saved else None)
        self.command = config.command or "explorer.training.train (Python)"
        self.history: list[dict] = []
        self.t_start = self.last_checkpoint_at = time.perf_counter()
        self.run_log.write({
            "event": "resume" if saved else "start", "step": self.step, "total_steps": self.total,
            "time": time.time(), "method": method.name, "config": config.to_dict(), "seed": config.seed,
            "device": str(self.device), "precision": self.precision, "steps_per_epoch": self.steps_per_epoch,
            "batches_per_epoch": len(self.source), "warmup_steps": schedule.warmup_steps, "command": self.command,
            "notes": self.notes, "init": None if init is None else init.to_dict(), "world_size": self.world,
        })

    def elapsed(self) -> float:
        return self.elapsed_before + time.perf_counter() - self.t_start

    def loop(self, bar, on_metrics, should_stop=None) -> None:
        config, start = self.config, self.step
        while self.step < self.total:
            epoch = self.step // self.steps_per_epoch
            batches = iter(self.source.batches(epoch, (self.step % self.steps_per_epoch) * config.accumulate))
            try:
                for _ in range(self.step % self.steps_per_epoch, self.steps_per_epoch):
                    if self.agree(should_stop is not None and should_stop()):
                        self.stop()
                        return
                    row = self.update(_take(batches, config.accumulate, epoch), epoch)
                    bar.update(1)
                    bar.set_postfix(loss=f"{row['loss']:.4f}", refresh=False)
                    logged = self.step % config.log_every == 0 or self.step == self.total
                    if logged:
                        self.metrics.write(row)
                    if self.step < self.total and self.checkpoint_due():
                        self.checkpoint(finished=False)
                    if logged and on_metrics is not None:
                        on_metrics(row)
                    if self.step == self.total:
                        break
            finally:
                close = getattr(batches, "close", None)
                if close is not None:
                    close()
        if self.agree(self.step > start or not (self.out_dir / WEIGHTS_FILE).exists()):
            self.checkpoint(finished=True)

    def stop(self) -> None:
        """A requested stop: checkpoint this step (unless one is on disk), log it, and let ``train`` return."""
        folder = latest_checkpoint(self.out_dir)
        if self.agree(self.step > 0 and (folder is None or folder.name != checkpoint_folder_name(self.step))):
            self.checkpoint(finished=False)
        self.stopped = True
        self.run_log.write({"event": "stop", "step": self.step, "time": time.time(), "reason": "should_stop",
                            "checkpoint": self.step > 0})

    def checkpoint_due(self) -> bool:
        """Every ``checkpoint_every`` steps, or once ``checkpoint_minutes`` of wall time passed since the last
        checkpoint (a killed background build then loses at most that much work)."""
        every, minutes = self.config.checkpoint_every, self.config.checkpoint_minutes
        if every and self.step % every == 0:
            return True
        # ranks' clocks differ: under DDP a checkpoint is due when any rank says so
        return bool(minutes) and self.agree(time.perf_counter() - self.last_checkpoint_at >= 60 * minutes)

    def agree(self, flag: bool) -> bool:
        """``flag``, or under DDP whether any rank says yes (every rank asks at the same point)."""
        return flag if self.ranks is None else self.ranks.agree(flag)

    def update(self, window: list, epoch: int) -> dict:
        """One optimizer step from the accumulated micro-batches; returns its metrics row."""
        t0 = time.perf_counter()
        lrs = group_lrs(self.optimizer)  # the rates this step runs at
        n = sum(len(batch) for batch in window)
        losses = self.method.losses
        if self.ranks is not None:
            losses = self.ddp or self.wrap(window[0].to(self.device))
        self.optimizer.zero_grad(set_to_none=True)
        terms: dict[str, float] = {}
        for i, batch in enumerate(window):
            share = len(batch) / n
            # under DDP the gradients are averaged over ranks after the window's last backward only
            syncing = self.ddp is None or i == len(window) - 1
            with contextlib.nullcontext() if syncing else self.ddp.no_sync():
                # where training stands, for losses that change over a run (SEPS's warm-up)
                batch = replace(batch, extras={**batch.extras, "step": self.step, "epoch": epoch})
                with self.amp:
                    parts = losses(batch.to(self.device))
                if not parts:
                    raise TrainingError(f"{self.method.title}.losses returned no terms")
                self.scaler.scale(sum(parts.values()) * share).backward()
            for key, value in parts.items():
                terms[key] = terms.get(key, 0.0) + float(value.detach()) * share
        if self.ranks is not None:  # each rank's terms are its share: their mean is the global-batch loss
            terms = dict(zip(terms, self.ranks.mean(list(terms.values()))))
        n *= self.world
        loss = sum(terms.values())
        if not math.isfinite(loss):  # before the update, so the weights stay as they were
            raise TrainingError(f"the loss became {loss} at step {self.step + 1} (terms {terms}); "
                                + ("try bf16 or fp32, " if self.precision == "fp16" else "")
                                + "lower the learning rate, or resume from the last checkpoint.")
        self.scaler.unscale_(self.optimizer)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.parameters, self.config.clip_grad_norm or math.inf))
        self.scaler.step(self.optimizer)
        self.scaler.update()
        with warnings.catch_warnings():
            # fp16: the scaler skips an update whose gradients overflowed; the schedule still advances
            # (its length is counted in steps taken), which torch warns about.
            warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler.step\(\)`")
            self.scheduler.step()
        self.step += 1
        self.samples += n
        seconds = time.perf_counter() - t0
        row = {"step": self.step, "epoch": epoch, "loss": loss, **{f"loss/{k}": v for k, v in terms.items()},
               **{f"lr/{group}": lr for group, lr in lrs.items()}, "grad_norm": grad_norm, "samples": self.samples,
               "samples_per_s": n / seconds if seconds > 0 else math.inf, "elapsed_s": self.elapsed()}
        if self.scaler.is_enabled():
            row["grad_scale"] = float(self.scaler.get_scale())  # it drops when an update was skipped
        if self.device.type == "cuda":  # the step's peak GPU memory, for live curves
            row["gpu_mem_gb"] = torch.cuda.max_memory_allocated(self.device) / 2**30
            torch.cuda.reset_peak_memory_stats(self.device)
        self.history.append(row)
        return row

    def wrap(self, batch):
        """The DDP wrapper, made once before the first step (ddp.wrap: the unused-parameter probe)."""
        self.ddp, unused = ddp.wrap(self.method, self.ranks, batch, self.amp)
        self.run_log.write({"event": "ddp", "step": self.step, "time": time.time(), "world_size": self.world,
                            "backend": self.ranks.backend,
                            "find_unused_parameters": bool(unused), "unused_parameters": unused[:20]})
        return self.ddp

    def checkpoint(self, finished: bool) -> None:
        if self.ranks is not None and not self.ranks.leader:
            self.ranks.barrier()  # rank 0 writes; the others wait until the files are complete
            return
        state = {"step": self.step, "samples": self.samples, "elapsed_s": self.elapsed(),
                 "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                 "scaler": self.scaler.state_dict(), "rng": capture_rng(), "config": self.config.to_dict(),
                 "total_steps": self.total, "steps_per_epoch": self.steps_per_epoch, "init_source": self.init_source,
                 "world_size": self.world}
        metadata = {"training": {"step": self.step, "total_steps": self.total, "seed": self.config.seed,
                                 "command": self.command, "init": self.init_source, "finished": finished}}
        save_checkpoint(self.out_dir, self.method, state, metadata, keep_last=self.config.keep_checkpoints)
        self.last_checkpoint_at = time.perf_counter()
        write_manifest(self.out_dir, self.name, self.method, source=f"trained by explorer: {self.command}",
                       notes=_manifest_notes(self.step, self.total, self.config, self.init_source, finished))
        self.run_log.write({"event": "finish" if finished else "checkpoint", "step": self.step, "time": time.time()})
        if self.ranks is not None:
            self.ranks.barrier()

    def result(self) -> TrainResult:
        return TrainResult(out_dir=self.out_dir, manifest=self.out_dir / f"{self.name}.json",
                           weights=self.out_dir / WEIGHTS_FILE, metrics_path=self.metrics.path,
                           run_log_path=self.run_log.path, steps=self.step, total_steps=self.total,
                           resumed_from=self.resumed_from, last=self.history[-1] if self.history else {},
                           history=self.history, device=str(self.device), precision=self.precision,
                           notes=self.notes, stopped=self.stopped, rank=0 if self.ranks is None else self.ranks.rank,
                           world_size=self.world)


def _take(batches, count: int, epoch: int) -> list:
    window = []
    for _ in range(count):
        try:
            window.append(next(batches))
        except StopIteration:
            raise TrainingError(f"the data source ended early in epoch {epoch}: it gave fewer batches than "
                                "its len() promised") from None
    return window


def _check_same_run(saved: dict, config: TrainConfig, folder: Path) -> None:
    now = config.to_dict()
    changed = sorted(k for k in now if k not in RESUMABLE_CHANGES and k in saved
                     and _plain(saved[k]) != _plain(now[k]))
    if changed:
        details = ", ".join(f"{k}: {saved[k]!r} -> {now[k]!r}" for k in changed)
        raise TrainingError(f"{folder} was trained with other settings ({details}); a resumed run keeps its "
                            "settings. Start a new run (another output folder, init from this one) to change them.")


def _plain(value):
    return list(value) if isinstance(value, tuple) else value


def _manifest_notes(step: int, total: int, config: TrainConfig, init_source: str | None, finished: bool) -> str:
    start = f"from {init_source}" if init_source else "from scratch"
    state = "finished" if finished else "in progress"
    return f"{state}: step {step} of {total}, {start}, seed {config.seed}; see run.jsonl and metrics.jsonl"


def _progress_bar(progress: bool, total: int, initial: int, method):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, disable=not progress, unit="step", desc=f"train {method.name}",
                dynamic_ncols=True)


__all__ = ["TrainConfig", "TrainResult", "TrainingError", "as_batch_source", "resolve_precision", "seed_everything",
           "train"]
