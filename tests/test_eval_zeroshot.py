"""``explorer eval-zeroshot``: CIFAR's binary bytes, ImageNet-V2's and ImageNet-O's folders and a folder of
classes written here as released; top-1/top-5 against a hand computation for both scorers (CLIP's
template-averaged classifier, and a method's own score averaged over templates); the pickle release
refused without --allow-pickle; unknown class folders skipped; resume; the CLI."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

from explorer.cli import main
from explorer.data.class_sets import read_class_set
from explorer.data.class_sets.names import imagenet_classnames, imagenet_wnids, templates
from explorer.data.errors import DatasetError
from explorer.evaluation.zeroshot import class_scorer, evaluate_zeroshot

ZOO = Path(__file__).resolve().parents[1] / "checkpoints"


def cifar_records(labels, label_bytes=1) -> bytes:
    """Records as the binary release writes them: label byte(s), then the red, green and blue planes; record i
    is a flat picture of grey level 10 * i with its red plane's first pixel 255."""
    out = bytearray()
    for i, label in enumerate(labels):
        planes = np.full((3, 32, 32), 10 * i, dtype=np.uint8)
        planes[0, 0, 0] = 255
        out += bytes([label % 20] * (label_bytes - 1) + [label]) + planes.tobytes()
    return bytes(out)


def write_cifar10(root: Path, labels=(3, 0, 1, 12), truncated=False) -> Path:
    folder = root / "cifar-10-batches-bin"
    folder.mkdir(parents=True)
    data = cifar_records(labels) + (b"\x01" * 100 if truncated else b"")
    (folder / "test_batch.bin").write_bytes(data)
    (folder / "batches.meta.txt").write_text("airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n\n")
    return root


def picture(path: Path, value: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((8, 8, 3), value, dtype=np.uint8)).save(path)


class Features(SimpleNamespace):
    def __len__(self):
        return len(self.cls)


class Fake:
    """Known scores. Cosine kind: a prompt's text vector is ``vectors[prompt]``, a picture's image vector its
    mean pixel level over 255 and one minus that. Own-score kind: ``table[prompt] * level``."""

    method_name, score_label = "fake", "cosine"

    def __init__(self, vectors=None, table=None):
        self.vectors, self.table, self.global_score = vectors, table, table is None

    def encode_image(self, images):
        level = torch.tensor([np.asarray(i, dtype=float).mean() / 255 for i in images], dtype=torch.float32)
        return Features(cls=torch.stack([level, 1 - level], dim=1), level=level)

    def encode_text(self, texts):
        return SimpleNamespace(eot=torch.tensor([self.vectors[t] for t in texts], dtype=torch.float32))

    def similarity(self, features, texts):
        return features.level[:, None] * torch.tensor([[self.table[t] for t in texts]])


def test_cifar_binary_bytes_decode_as_released(tmp_path):
    found = read_class_set(write_cifar10(tmp_path, truncated=True), "cifar10")
    assert found.classnames[:2] == ("airplane", "automobile") and len(found.classnames) == 10
    assert found.title == "CIFAR-10"  # the set carries the name the tables print: no lookup by layout name
    assert [p.label for p in found.pictures] == [3, 0, 1]
    image = np.asarray(found.pictures[1].image())
    assert image.shape == (32, 32, 3) and tuple(image[0, 0]) == (255, 10, 10) and tuple(image[5, 5]) == (10, 10, 10)
    assert {s.reason.split(":")[0] for s in found.skipped} == {"truncated record", "unknown class"}
    folder = tmp_path / "c100" / "cifar-100-binary"
    folder.mkdir(parents=True)
    (folder / "test.bin").write_bytes(cifar_records([42, 7], label_bytes=2))
    (folder / "fine_label_names.txt").write_text("\n".join(f"class_{i}" for i in range(100)))
    hundred = read_class_set(tmp_path / "c100", "cifar100")
    assert [p.label for p in hundred.pictures] == [42, 7] and hundred.classnames[42] == "class 42"
    assert hundred.title == "CIFAR-100"


def test_cifar_pickle_only_behind_allow_pickle(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    data = np.zeros((2, 3072), dtype=np.uint8)
    (folder / "test_batch").write_bytes(pickle.dumps({b"data": data, b"labels": [1, 2]}))
    (folder / "batches.meta").write_bytes(pickle.dumps({b"label_names": [b"airplane", b"automobile", b"bird"]}))
    with pytest.raises(DatasetError, match="allow-pickle"):
        read_class_set(tmp_path, "cifar10")
    found = read_class_set(tmp_path, "cifar10", allow_pickle=True)
    assert [p.label for p in found.pictures] == [1, 2] and found.classnames == ("airplane", "automobile", "bird")


def test_imagenet_folders_by_index_and_by_wordnet_id(tmp_path):
    v2 = tmp_path / "imagenetv2-matched-frequency-format-val"
    for folder, value in (("0", 0), ("999", 50), ("extra", 90)):
        picture(v2 / folder / "a.jpeg", value)
    found = read_class_set(tmp_path, "imagenet-v2")
    assert [(p.id, p.label) for p in found.pictures] == [("0/a.jpeg", 0), ("999/a.jpeg", 999)]
    assert found.classnames[0] == imagenet_classnames()[0] and len(found.classnames) == 1000
    assert found.title == "ImageNet-V2"
    assert [s.reason.split(":")[0] for s in found.skipped] == ["unknown class folder"]
    wnids = imagenet_wnids()
    assert wnids is not None and wnids[0] == "n01440764" and wnids == sorted(wnids)
    o = tmp_path / "imagenet-o"
    for folder in (wnids[1], wnids[996], wnids[994], "n99999999"):  # 994 is an ImageNet class, not ImageNet-O's
        picture(o / folder / "x.jpg")
    found = read_class_set(o, "imagenet-o", class_set="present")
    names = imagenet_classnames()
    assert found.classnames == (names[1], names[994], names[996]) and [p.label for p in found.pictures] == [0, 1, 2]
    assert found.skipped[0].item == "n99999999" and found.title == "ImageNet-O"
    (tmp_path / "names.txt").write_text(f"{wnids[1]} a goldfish\n{wnids[994]} a mushroom\n{wnids[996]} a hen\n")
    given = read_class_set(o, "imagenet-o", classnames=tmp_path / "names.txt", class_set="present")
    assert given.classnames == ("a goldfish", "a mushroom", "a hen")
    with pytest.raises(DatasetError, match="no name for 198 of ImageNet-O's classes"):
        read_class_set(o, "imagenet-o", classnames=tmp_path / "names.txt")  # the fixed 200 need every name


def test_both_scorers_equal_a_hand_computation(tmp_path):
    for name, value in (("red_circle", 255), ("blue_square", 0), ("blue_square", 200)):
        picture(tmp_path / "classes" / name / f"{value}.png", value)
    (tmp_path / "classes" / "empty").mkdir()
    found = read_class_set(tmp_path / "classes", "folder")
    assert found.classnames == ("blue square", "red circle") and found.skipped[0].reason.startswith("unknown class")
    chosen = ["a {}.", "the {}!"]
    vectors = {"a blue square.": [0.0, 2.0], "the blue square!": [1.0, 1.0],
               "a red circle.": [1.0, 0.0], "the red circle!": [3.0, 1.0]}
    cosine = evaluate_zeroshot({"m": Fake(vectors=vectors)}, found, templates=chosen, progress=False)
    unit = {k: np.asarray(v) / np.linalg.norm(v) for k, v in vectors.items()}
    classes = [unit["a blue square."] + unit["the blue square!"], unit["a red circle."] + unit["the red circle!"]]
    classes = [c / np.linalg.norm(c) for c in classes]
    right = []
    for p in found.pictures:  # levels 0 and 200/255 (blue square: the second is wrong), 1 (red circle)
        level = np.asarray(p.image(), dtype=float).mean() / 255
        image = np.array([level, 1 - level]) / np.linalg.norm([level, 1 - level])
        right.append(int(np.argmax([image @ c for c in classes])) == p.label)
    assert cosine["models"][0]["top1"] == pytest.approx(np.mean(right)) and cosine["models"][0]["top5"] == 1.0
    model = Fake(vectors=vectors)
    features = model.encode_image([p.image() for p in found.pictures])
    image = features.cls.numpy() / np.linalg.norm(features.cls.numpy(), axis=1, keepdims=True)
    assert np.allclose(class_scorer(model, found.classnames, chosen)(features), image @ np.stack(classes).T)
    assert 0 < np.mean(right) < 1  # the hand count is not trivially all or nothing
    table = {"a blue square.": 1.0, "the blue square!": 0.0, "a red circle.": 0.0, "the red circle!": 0.9}
    own = evaluate_zeroshot({"m": Fake(table=table)}, found, templates=chosen, progress=False)
    # class scores are level * mean over templates: blue square 0.5 * level, red circle 0.45 * level; a
    # level-0 picture ties (class 0 first), so blue squares are right and the red circle is wrong
    assert own["models"][0]["top1"] == pytest.approx(2 / 3) and own["models"][0]["n"] == 3
    model = Fake(table=table)
    features = model.encode_image([p.image() for p in found.pictures])
    level = features.level.numpy()[:, None]
    assert np.allclose(class_scorer(model, found.classnames, chosen)(features), level * np.array([[0.5, 0.45]]))


def test_templates_file_and_defaults(tmp_path):
    found, source = templates(None)
    assert len(found) == 80 and all(t.count("{}") == 1 for t in found) and "OPENAI" in source
    (tmp_path / "t.txt").write_text("# mine\na photo of a {}.\n\nart of the {}\n")
    assert templates(str(tmp_path / "t.txt"))[0] == ["a photo of a {}.", "art of the {}"]
    (tmp_path / "bad.txt").write_text("a photo\n")
    with pytest.raises(Exception, match="exactly one"):
        templates(str(tmp_path / "bad.txt"))


def test_resume_and_cli(tmp_path, capsys):
    root = write_cifar10(tmp_path / "c10", labels=(3, 0, 1, 2, 5))
    out = tmp_path / "zs.json"
    argv = ["--checkpoints", str(ZOO / "demo"), "eval-zeroshot", "--data", str(root), "--layout", "cifar10",
            "--model", "demo-clip-base", "--templates", "simple", "--out", str(out), "--no-progress"]
    assert main(argv + ["--limit", "2"]) == 0
    work = tmp_path / "zs.json.work.jsonl"
    assert len(work.read_text().splitlines()) == 1 + 2
    assert main(argv + ["--csv", str(tmp_path / "zs.csv")]) == 0  # the two already scored are read back
    lines = work.read_text().splitlines()
    assert len(lines) == 1 + 5 and len({json.loads(line).get("key") for line in lines[1:]}) == 5
    entry = json.loads(out.read_text())["models"][0]
    assert set(entry) >= {"name", "method", "top1", "top5", "n"} and entry["n"] == 5
    assert (tmp_path / "zs.csv").read_text().startswith("model,method,top1,top5,n")
    assert "top-1" in capsys.readouterr().out
    assert main(argv[:5] + ["--layout", "imagenet-o"] + argv[7:]) == 2  # no WordNet-id folders: said, no crash


def test_layouts_detected_from_names(tmp_path):
    from explorer.data.class_sets import detect

    assert detect(write_cifar10(tmp_path / "c10")) == "cifar10"
    picture(tmp_path / "v2" / "imagenetv2-top-images-format-val" / "7" / "a.png")
    assert detect(tmp_path / "v2") == "imagenet-v2"
    picture(tmp_path / "o" / "n01443537" / "a.png")
    assert detect(tmp_path / "o") == "imagenet-o"
    picture(tmp_path / "f" / "red_circle" / "a.png")
    picture(tmp_path / "f" / "blue_star" / "a.png")
    assert detect(tmp_path / "f") == "folder"


def test_imagenet_o_is_classified_among_clip_benchmarks_fixed_200(tmp_path):
    from explorer.data.class_sets.reference_lists import IMAGENET_O_WNIDS

    wnids, names = imagenet_wnids(), imagenet_classnames()
    o = tmp_path / "imagenet-o"
    for folder in (wnids[1], wnids[996], wnids[994]):  # two of the 200 present, one ImageNet class that is not
        picture(o / folder / "x.jpg")
    found = read_class_set(o, "imagenet-o")
    # clip_benchmark: ImageNet-1k's names masked by its 200 WordNet ids, in ImageNet's order
    assert len(IMAGENET_O_WNIDS) == len(set(IMAGENET_O_WNIDS)) == 200 and set(IMAGENET_O_WNIDS) <= set(wnids)
    assert found.classnames == tuple(names[i] for i, wnid in enumerate(wnids) if wnid in IMAGENET_O_WNIDS)
    assert (found.classnames[0], found.classnames[1], found.classnames[-1]) == (
        "goldfish", "triceratops", "hen of the woods mushroom")
    assert [(p.id.split("/")[0], p.label) for p in found.pictures] == [(wnids[1], 0), (wnids[996], 199)]
    assert [s.item for s in found.skipped] == [wnids[994]]  # an ImageNet class outside ImageNet-O's 200
    assert "198 of them with no folder here" in found.notes[0]
    with pytest.raises(DatasetError, match="unknown --class-set 'all'; the choices are fixed, present"):
        read_class_set(o, "imagenet-o", class_set="all")


class Recording(Fake):
    """Every prompt's text vector is (1, 0); the prompts read are kept."""

    def __init__(self):
        super().__init__(vectors=None)
        self.texts = []

    def encode_text(self, texts):
        self.texts += list(texts)
        return SimpleNamespace(eot=torch.tensor([[1.0, 0.0]] * len(texts)))


def test_cifar_reads_clips_18_cifar_templates_by_default(tmp_path):
    root = write_cifar10(tmp_path / "c10", labels=(3, 0))
    model = Recording()
    result = evaluate_zeroshot({"m": model}, root, progress=False, layout="cifar10")
    assert len(model.texts) == 10 * 18 and result["dataset"]["templates"] == 18
    assert model.texts[:2] == ["a photo of a airplane.", "a blurry photo of a airplane."]  # CLIP's own grammar
    assert model.texts[17] == "a photo of the big airplane." and model.texts[18] == "a photo of a automobile."
    assert result["protocol"]["templates"] == result["protocol"]["templates_default"] == "cifar"
    assert "prompts.md" in result["dataset"]["templates_from"]
    chosen = Recording()
    again = evaluate_zeroshot({"m": chosen}, root, templates="openai", progress=False, layout="cifar10")
    assert len(chosen.texts) == 10 * 80 and again["protocol"]["templates"] == "openai"


def test_folder_pictures_are_read_as_stored_not_exif_turned(tmp_path):
    from explorer.data.class_sets.base import ClassPicture

    exif = Image.Exif()
    exif[0x0112] = 6  # "turn a quarter": torchvision's ImageFolder loader (clip_benchmark's) does not
    path = tmp_path / "n01443537" / "a.jpg"
    path.parent.mkdir()
    Image.fromarray(np.zeros((8, 16, 3), dtype=np.uint8)).save(path, exif=exif)
    assert ClassPicture("a", 0, path).image().size == (16, 8)
