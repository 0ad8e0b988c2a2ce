"""Issue 63, part 3: before a run each evaluation says the forwards it will make (the count the towers then make,
counted with forward hooks on a demo model) and, after its first batches, the time left measured on them (the
clock mocked); the next batch's pictures are decoded in a background thread with the same results as without,
and a picture that does not open still reaches the skipped-with-reason path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from explorer.data.class_sets import read_class_set
from explorer.evaluation.pace import Pace
from explorer.core.prefetch import prefetched
from explorer.evaluation.zeroshot import evaluate_zeroshot

ZOO = Path(__file__).resolve().parents[1] / "checkpoints" / "demo"


def _forwards_counter():
    """``bench/eval_throughput.py``'s ``Forwards``: rows through each tower, counted by forward pre-hooks."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("eval_throughput", ZOO.parents[1] / "bench" / "eval_throughput.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Forwards


Rows = _forwards_counter()


@pytest.fixture(scope="module")
def model():
    from explorer.zoo import Zoo

    return Zoo(ZOO, precision="fp32").load("demo-clip-base")


def classes(root: Path, broken: bool = False) -> Path:
    """Two class folders of five small pictures in all (and one that does not open)."""
    for i, name in enumerate(("cat/a.png", "cat/b.png", "dog/c.png", "dog/d.png", "dog/e.png")):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((12, 12, 3), 40 * i, dtype=np.uint8)).save(root / name)
    if broken:
        (root / "cat" / "z.png").write_bytes(b"not a picture")
    return root


def test_the_estimate_is_the_pace_of_the_first_batches():
    ticks, lines = iter([0.0, 4.0]), []
    pace = Pace("m: zero-shot", lines.append, clock=lambda: next(ticks), first=2)
    pace.start(1000, "details")
    pace.batch_done(10)
    assert len(lines) == 1  # one batch is not timed yet
    pace.batch_done(10)  # 2 batches, 20 forwards in 4 s: 980 left at 0.2 s each
    assert lines == ["m: zero-shot: 1000 forwards to make (details)",
                     "m: zero-shot: ~1000 forwards, first batches 2.00 s each: about 3 min left"]
    assert pace.estimate == pytest.approx(196.0)
    pace.batch_done(10)
    assert len(lines) == 2  # said once


def test_zeroshot_says_the_forwards_it_then_makes(tmp_path, model):
    dataset = read_class_set(classes(tmp_path / "set"), "folder")
    lines, rows = [], Rows(model.method)
    try:
        evaluate_zeroshot({"m": model}, dataset, templates="simple", progress=False, batch=2, say=lines.append)
    finally:
        rows.close()
    prompts = len(dataset.classnames) * 7  # "simple": 7 templates
    made = rows.images + rows.texts
    assert (rows.images, rows.texts) == (5, prompts)
    assert lines[0].startswith(f"m: zero-shot: {made} forwards to make (5 pictures in 3 batches")
    assert lines[1].startswith(f"m: zero-shot: ~{made} forwards, first batches ") and lines[1].endswith(" left")


def test_prefetch_keeps_the_results_and_the_skip_reasons(tmp_path, model):
    dataset = read_class_set(classes(tmp_path / "set", broken=True), "folder")
    runs = [evaluate_zeroshot({"m": model}, dataset, templates="simple", progress=False, batch=2, ahead=ahead)
            for ahead in (0, 1)]
    for run in runs:
        run.pop("timing")
    assert runs[0] == runs[1]
    assert runs[1]["models"][0]["n"] == 5
    assert sum(runs[1]["skipped_pictures"].values()) == 1
    assert next(iter(runs[1]["skipped_pictures"])).startswith("z.png is not an image")


def test_prefetch_reads_ahead_in_another_thread_in_order():
    import threading

    readers = []

    def read(batch):
        readers.append(threading.current_thread().name)
        return [x * 10 for x in batch]

    batches = [[1, 2], [3], [4, 5]]
    assert list(prefetched(batches, read)) == [(b, [x * 10 for x in b]) for b in batches]
    assert all(name.startswith("decode") for name in readers)
    assert list(prefetched(batches, read, ahead=0)) == [(b, [x * 10 for x in b]) for b in batches]


def test_hard_negatives_read_each_long_caption_once(tmp_path):
    """The long caption's score comes from retrieval's matrix: the same metrics as reading it again beside its
    negatives, one text forward fewer per scene with negatives in reach."""
    import json

    from explorer.data import read_dataset, write_dataset
    from explorer.evaluation.runner import encode_images, hard_negative_metrics, score_captions
    from explorer.zoo import Zoo

    write_dataset(tmp_path / "w", n_scenes=6, seed=3, image_size=32, split_fractions=(0.0, 0.0, 1.0))
    scenes = read_dataset(tmp_path / "w", "test")
    manifest = json.loads((ZOO.parent / "tiny-untrained.json").read_text())
    (tmp_path / "zoo").mkdir()
    (tmp_path / "zoo" / "tiny.json").write_text(json.dumps({**manifest, "name": "tiny"}))
    tiny = Zoo(tmp_path / "zoo", precision="fp32").load("tiny")
    features = encode_images(tiny, [s.image for s in scenes])
    long = score_captions(tiny, features, [s.long_caption for s in scenes])
    rows = Rows(tiny.method)
    again = hard_negative_metrics(tiny, features, scenes)
    twice, rows.texts = rows.texts, 0
    once = hard_negative_metrics(tiny, features, scenes, own=long.diagonal())
    rows.close()
    assert once == again and once[1]["hard_negative_scenes"] > 0
    in_reach = sum(1 for s in scenes if s.hard_negatives)  # the tiny model reads every negative
    assert twice - rows.texts == in_reach > 0


def test_negatives_count_the_forwards_a_group_makes(tmp_path, model):
    from types import SimpleNamespace

    from explorer.evaluation.negatives import group_forwards, score_group
    from explorer.evaluation.work_file import MemoryWork

    path = tmp_path / "p.png"
    Image.fromarray(np.full((40, 40, 3), 90, dtype=np.uint8)).save(path)
    items = [SimpleNamespace(id=str(i), split="s", picture=path, box=box, positive=f"a red cube {i}",
                             negatives=(f"a blue cube {i}", f"a green cube {i}"))
             for i, box in enumerate(((2, 2, 20, 20), (10, 10, 25, 25), None))]
    rows, work = Rows(model.method), MemoryWork({})
    try:
        score_group("m", model, items, work, "crop")  # (roi's pooling runs torchvision's compiled roi_align: slow)
    finally:
        rows.close()
    assert rows.images + rows.texts == group_forwards(items, "crop") == 3 + 9  # a crop each, every caption
    assert group_forwards(items, "roi") == 2 + 9  # one picture for both boxes, the whole picture without one


def test_negatives_read_ahead_score_as_without(tmp_path):
    from test_eval_negatives import Fake, write_fg_ovd

    from explorer.data.negatives_sets import read_negatives_set
    from explorer.evaluation.negatives import evaluate_negatives

    dataset = read_negatives_set(write_fg_ovd(tmp_path / "fg"), layout="fg-ovd")
    table = {f"caption {i}": 0.1 * (i % 7) for i in range(1, 13)}
    runs = [evaluate_negatives({"m": Fake(table)}, dataset, progress=False, region="crop", group=1, ahead=ahead)
            for ahead in (0, 1)]
    for run in runs:
        run.pop("timing")
    assert runs[0] == runs[1]
    assert "one-pixel crop" in runs[1]["dataset"]["skipped"]  # a crop refused while read ahead: still its reason


def test_the_store_progress_starts_each_phase_and_times_its_batches():
    ticks, lines = iter([0.0, 1.0, 5.0]), []  # images start, captions start, captions' second batch
    pace = Pace("m", lines.append, clock=lambda: next(ticks))
    for done, total, phase in ((2, 10, "images"), (6, 10, "images"), (10, 10, "images"),
                               (0, 40, "captions"), (10, 40, "captions"), (20, 40, "captions")):
        pace.progress(done, total, phase)
    assert lines == ["m: images: 8 forwards to make", "m: captions: 40 forwards to make",
                     "m: captions: ~40 forwards, first batches 2.00 s each: about 4 s left"]  # images: done, none said
