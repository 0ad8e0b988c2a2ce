"""A run's data folder as training samples, and what it holds back for the final evaluation.

    plan = inspect_data("data/world")       # cheap (no picture decoded): layout, split, count; JobError if unusable
    samples = read_samples(plan)            # a lazy sequence of TrainingSample (pictures read on access)

What a folder may be, tried in this order:

1. the synthetic world (``scenes.jsonl``, ``explorer data synth``): the ``train`` split, each scene with
   its long caption, short caption, sentences and dense caption; evaluated after training on the
   ``test`` split by ``explorer eval``'s measures (``final_eval``);
2. a sample folder (``samples.jsonl``, ``explorer.training.SampleFolder``): every sample, with the
   fields it has (local pairs included); nothing is held out, so no final evaluation;
3. any retrieval benchmark layout ``explorer.data.retrieval_sets`` reads (DOCCI, Urban1k, DCI,
   ShareGPT4V, COCO/Flickr in Karpathy's split, GOAL's json, a manifest, a plain folder): one sample
   per (image, caption), with the caption's sentences; the ``train_split`` when the layout has
   one, else the layout's only split (said in ``plan.notes``). Evaluated on the layout's ``test``
   split by Recall@K when that split exists and is not the one trained on; skipped otherwise.

What a method needs of its data and its init is said by its class (``check_data_and_init``): GOAL
trains on FLISM local pairs (a region box and its sentence). A folder without them gets them
mined by ``mine_local_pairs`` with a CLIP-family model (the run's init), and cached in the run folder
(``local_pairs.jsonl``) so a resumed run sees the same pairs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from explorer.core.errors import ExplorerError
from explorer.jobs.records import JobError

SCENES_FILE = "scenes.jsonl"
SAMPLES_FILE = "samples.jsonl"
PAIRS_FILE = "local_pairs.jsonl"
HELD_OUT_SPLIT = "test"


@dataclass
class DataPlan:
    path: Path
    kind: str  # "synthetic", "samples", or the retrieval layout's name
    split: str | None  # the split trained on (None: the folder has no splits)
    count: int  # training samples
    has_local_pairs: bool = False
    eval_kind: str | None = None  # "synthetic", "retrieval", or None (nothing held out)
    eval_split: str | None = None
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        split = f", split {self.split}" if self.split else ""
        held = (f"; evaluated on {self.eval_split}" if self.eval_kind else "; no held-out split: no final evaluation")
        return f"{self.kind} at {self.path}{split}: {self.count} training samples{held}"

    def to_dict(self) -> dict:
        return {"path": str(self.path), "kind": self.kind, "split": self.split, "count": self.count,
                "has_local_pairs": self.has_local_pairs, "eval_kind": self.eval_kind, "eval_split": self.eval_split,
                "notes": list(self.notes)}


def inspect_data(path: str | Path, train_split: str = "train") -> DataPlan:
    """What ``path`` gives as training data, found from its index files alone; ``JobError`` if nothing."""
    from explorer.data.errors import DatasetError

    path = Path(path).expanduser()
    if not path.exists():
        raise JobError(f"no data at {path}: the path does not exist")
    try:
        if (path / SCENES_FILE).is_file():
            return _synthetic_plan(path, train_split)
        if (path / SAMPLES_FILE).is_file():
            return _samples_plan(path)
        return _retrieval_plan(path, train_split)
    except JobError:
        raise
    except (DatasetError, ExplorerError, OSError, ValueError) as error:
        raise JobError(f"cannot read {path} as training data: {error}") from error


def _synthetic_plan(path: Path, split: str) -> DataPlan:
    from explorer.data import read_dataset

    scenes = read_dataset(path, split)
    if not scenes:
        raise JobError(f"the {split!r} split of the synthetic world at {path} has no scenes")
    held_out = split != HELD_OUT_SPLIT and bool(read_dataset(path, HELD_OUT_SPLIT))
    notes = [] if held_out else [f"the world has no {HELD_OUT_SPLIT!r} scenes apart from the training split: "
                                 "no final evaluation"]
    return DataPlan(path=path, kind="synthetic", split=split, count=len(scenes),
                    eval_kind="synthetic" if held_out else None, eval_split=HELD_OUT_SPLIT if held_out else None,
                    notes=notes)


def _samples_plan(path: Path) -> DataPlan:
    from explorer.training.samples import SampleFolder

    folder = SampleFolder(path)
    pairs = all(record.get("local_box") is not None and record.get("local_sentence") for record in folder.records)
    return DataPlan(path=path, kind="samples", split=None, count=len(folder), has_local_pairs=pairs,
                    notes=[f"{SAMPLES_FILE}: every sample is trained on; nothing is held out"])


def _retrieval_plan(path: Path, split: str) -> DataPlan:
    from explorer.data.errors import DatasetError
    from explorer.data.retrieval_sets import detect, read_retrieval_set

    layout = detect(path)  # a DatasetError that lists every layout tried
    notes, fell_back = [], False
    try:
        data = read_retrieval_set(path, split, layout=layout)
    except DatasetError as error:
        data = read_retrieval_set(path, None, layout=layout)
        notes.append(f"{layout} has no {split!r} split ({error}); training on its {data.split!r} split")
        fell_back = True
    if not data.captions:
        raise JobError(f"{data.summary()}: no (image, caption) pair to train on")
    if data.skipped:
        notes.append(f"{len(data.skipped)} item(s) left out by the reader ({data.summary()})")
    eval_split = None
    if not fell_back and data.split not in (HELD_OUT_SPLIT, "all"):
        try:
            read_retrieval_set(path, HELD_OUT_SPLIT, layout=layout)
            eval_split = HELD_OUT_SPLIT
        except DatasetError:
            eval_split = None
    if eval_split is None:
        notes.append(f"{layout}: no held-out split besides {data.split!r}: no final evaluation")
    return DataPlan(path=path, kind=layout, split=data.split, count=len(data.captions),
                    eval_kind="retrieval" if eval_split else None, eval_split=eval_split, notes=notes)


# ---- reading ------------------------------------------------------------------------------------


class LazySamples(Sequence):
    """Training samples made on access from plain records (a picture is read each time it is used)."""

    def __init__(self, records: list[dict], root: Path | None = None):
        self.records, self.root = records, root

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index):
        from PIL import Image

        from explorer.training.samples import TrainingSample

        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        record = dict(self.records[index])
        with Image.open(record.pop("image_path")) as opened:
            image = opened.convert("RGB")
        if record.get("local_box") is not None:
            record["local_box"] = tuple(record["local_box"])
        return TrainingSample(image=image, **record)


def read_samples(plan: DataPlan) -> Sequence:
    """The training samples of ``plan`` (``inspect_data``), read lazily."""
    if plan.kind == "synthetic":
        from explorer.data import read_dataset

        records = [{"image_path": scene.image_path, "caption": scene.long_caption,
                    "short_caption": scene.short_caption, "sentences": [s.text for s in scene.sentences],
                    "dense_caption": scene.dense_caption} for scene in read_dataset(plan.path, plan.split)]
        missing = [str(r["image_path"]) for r in records
                   if r["image_path"] is None or not Path(r["image_path"]).is_file()]
        if missing:
            raise JobError(f"{len(missing)} picture(s) of {plan.path} are missing, e.g. {missing[0]}")
        return LazySamples(records)
    if plan.kind == "samples":
        from explorer.training.samples import SampleFolder

        return SampleFolder(plan.path)
    from explorer.core.sentences import split_sentences
    from explorer.data.retrieval_sets import read_retrieval_set

    data = read_retrieval_set(plan.path, plan.split, layout=plan.kind)
    records = [{"image_path": data.images[owner], "caption": caption,
                "sentences": split_sentences(caption) or [caption]}
               for caption, owner in zip(data.captions, data.caption_image)]
    return LazySamples(records)


# ---- GOAL's local pairs -------------------------------------------------------------------------


def mine_local_pairs(samples: Sequence, model, log: Callable[[str], None] = print,
                     should_stop: Callable[[], bool] | None = None) -> list[dict]:
    """FLISM with ``model`` (an ``explorer.Model``) on every sample: [{"local_box", "local_sentence"}]."""
    from explorer.core.sentences import split_sentences
    from explorer.grounding.flism import flism

    pairs = []
    for index in range(len(samples)):
        if should_stop is not None and should_stop():
            raise InterruptedError("stopped while mining FLISM local pairs")
        sample = samples[index]
        sentences = list(sample.sentences or split_sentences(sample.caption) or [sample.caption])
        result = flism(model, sample.image, sentences)
        box = result.pair_region.unit_box(sample.image.width, sample.image.height)
        pairs.append({"local_box": [float(v) for v in box], "local_sentence": result.pair_sentence})
        if (index + 1) % 500 == 0:
            log(f"FLISM local pairs: {index + 1}/{len(samples)}")
    return pairs


def with_local_pairs(samples: Sequence, pairs: list[dict]) -> Sequence:
    """``samples`` with each one's mined local pair filled in."""
    if len(pairs) != len(samples):
        raise JobError(f"{len(pairs)} local pairs for {len(samples)} samples: the data changed since they were mined")
    return _Paired(samples, pairs)


class _Paired(Sequence):
    def __init__(self, samples: Sequence, pairs: list[dict]):
        self.samples, self.pairs = samples, pairs

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index):
        from dataclasses import replace

        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        pair = self.pairs[index]
        return replace(self.samples[index], local_box=tuple(pair["local_box"]), local_sentence=pair["local_sentence"])


def save_pairs(path: Path, pairs: list[dict]) -> None:
    from explorer.core.jsonl import write_jsonl

    write_jsonl(path, pairs)


def load_pairs(path: Path) -> list[dict] | None:
    if not path.is_file():
        return None
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def check_data_and_init(method: str, plan, init, init_path: Path | None, init_method: str | None) -> None:
    """``JobError`` when the method cannot start from ``init`` or needs data the plan lacks (what it needs
    is said by its class: ``init_methods``, ``needs_local_pairs``)."""
    from explorer.models.methods import get_method

    cls = get_method(method)
    refusal = cls.refuse_init(init_method, str(init))
    if refusal:
        raise JobError(refusal)
    if cls.needs_local_pairs and not plan.has_local_pairs and init_path is None:
        raise JobError(f"{cls.title} trains on FLISM local pairs, which this data lacks; give init (the CLIP-family "
                       "checkpoint it fine-tunes from: it mines the pairs, as FAST-GOAL does with CLIP), or "
                       "data whose samples.jsonl has local_box and local_sentence.")


__all__ = ["DataPlan", "HELD_OUT_SPLIT", "LazySamples", "PAIRS_FILE", "check_data_and_init", "inspect_data",
           "load_pairs", "mine_local_pairs", "read_samples", "save_pairs", "with_local_pairs"]
