"""Where a demo base loses an attribute: its patches, its pooled embedding, or its text tower (issue 34).

    python zoo_research/binding_probes.py checkpoints/demo/clip-base.safetensors [--train-scenes 1500] [--test-scenes 300]

Five columns per attribute, each on the held-out world (seed 1, test split), probes fitted on the training
world (seed 0, train split); a linear probe is multinomial logistic regression on unit vectors:
- "object patches": a probe of each object's attribute from the mean of its patch features (the features
  maps read, the pool's values under an attention pool), pixels of the object weighting its patches: what
  the image tower sees of the object before pooling.
- "embedding x cell": a probe of the attribute of the object in a cell from the pooled image embedding, the
  cell's one-hot and their outer product: what the embedding keeps of it, bound to its place.
- "caption": ``explorer eval``'s fair one-word test, ``hard_negative_acc/<attribute>`` (the long caption
  against its rewrite, over the rewrites the model reads apart; chance 50 %); "sentence": the same test on
  the changed object sentence alone (the sentence and position the world's ``HardNegative`` records).
- "text 1-cos": how far the one-word change moves that sentence's text embedding (1 - cosine).
- "caption, trained on": the caption test on as many of the training world's scenes (seed 0, train split:
  the first scenes of that split are in every demo build's world) as held-out ones: the gap to "caption"
  is what the model learned of these scenes and not of the attribute.
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import numpy as np
import torch
import torch.nn.functional as F

from explorer.data.synthetic import generate_scenes
from explorer.data.vocabulary import POSITIONS
from explorer.evaluation.runner import encode_images, in_reach, score_captions
from explorer.models.io.loading import load_method
from explorer.models.model import Model
from explorer.training.demo_world import EVAL_SEED, IMAGE_SIZE, WORLD_OBJECTS

ATTRIBUTES = ("colour", "shape", "size", "texture")
PROBE_STEPS, PROBE_LR = 1000, 1e-2


def linear_probe(train_x: torch.Tensor, train_y: list, test_x: torch.Tensor, test_y: list) -> float:
    """Test accuracy (%) of a softmax regression fitted with Adam on unit-normalised inputs."""
    classes = {c: i for i, c in enumerate(sorted(set(train_y)))}
    x, y = F.normalize(train_x, dim=-1), torch.tensor([classes[c] for c in train_y])
    torch.manual_seed(0)
    head = torch.nn.Linear(x.shape[1], len(classes))
    optimizer = torch.optim.Adam(head.parameters(), PROBE_LR)
    for _ in range(PROBE_STEPS):
        optimizer.zero_grad()
        F.cross_entropy(head(x), y).backward()
        optimizer.step()
    with torch.no_grad():
        found = head(F.normalize(test_x, dim=-1)).argmax(1)
    truth = torch.tensor([classes.get(c, -1) for c in test_y])
    return 100 * float((found == truth).float().mean())


def object_rows(model: Model, scenes: list) -> tuple[dict, dict]:
    """Per object: the pixel-weighted mean of its patch features, and the embedding x cell vector; with its
    attributes."""
    patches, cells, labels = [], [], defaultdict(list)
    with torch.no_grad():
        for start in range(0, len(scenes), 50):
            chunk = scenes[start:start + 50]
            features = encode_images(model, [s.image for s in chunk])
            rows, columns = features.grid_hw
            for scene, pooled, patch in zip(chunk, F.normalize(features.cls.float(), dim=-1), features.patches.float()):
                # each patch's pixels (row-major, as the patch features), by object label: 0 background, i + 1 object i
                side = scene.labels.shape[0] // rows
                owner = scene.labels.reshape(rows, side, columns, side).transpose(0, 2, 1, 3)
                owner = torch.as_tensor(owner.reshape(rows * columns, side * side))
                for obj in scene.objects:
                    weight = (owner == obj.index + 1).float().mean(1)
                    one_hot = torch.zeros(len(POSITIONS))
                    one_hot[POSITIONS.index(obj.position)] = 1
                    patches.append((weight[:, None] * patch).sum(0) / weight.sum())
                    cells.append(torch.cat([pooled, one_hot, torch.outer(one_hot, pooled).flatten()]))
                    for attribute in ATTRIBUTES:
                        labels[attribute].append(getattr(obj, attribute))
    return {"object patches": torch.stack(patches), "embedding x cell": torch.stack(cells)}, labels


def one_word_tests(model: Model, scenes: list) -> dict:
    """Per attribute: the sentence-level and caption-level one-word accuracy, and the sentence's text move."""
    out = defaultdict(list)
    with torch.no_grad():
        for scene in scenes:
            image = encode_images(model, [scene.image])
            negatives = scene.hard_negatives
            scores = score_captions(model, image, [scene.long_caption, *(n.caption for n in negatives)])[0]
            for j, (negative, reachable) in enumerate(zip(negatives, in_reach(model, scene))):
                if reachable:
                    out[("caption", negative.attribute)].append(100 * float(scores[0] > scores[j + 1]))
                pair = [scene.sentences[negative.sentence].text, rewritten_sentence(scene, negative)]
                sentence_scores = score_captions(model, image, pair)[0]
                out[("sentence", negative.attribute)].append(100 * float(sentence_scores[0] > sentence_scores[1]))
                text = F.normalize(model.encode_text(pair).eot.float(), dim=-1)
                out[("text 1-cos", negative.attribute)].append(float(1 - text[0] @ text[1]))
    return {key: float(np.mean(values)) for key, values in out.items()}


def rewritten_sentence(scene, negative) -> str:
    """The negative's changed sentence: its words replaced where the record says (the long caption is the
    sentences joined by single spaces, so the sentence starts after its predecessors and their spaces)."""
    offset = sum(len(s.text) + 1 for s in scene.sentences[:negative.sentence])
    text, at = scene.sentences[negative.sentence].text, negative.start - offset
    assert text[at:at + len(negative.original)] == negative.original, (scene.id, negative)
    return text[:at] + negative.replacement + text[at + len(negative.original):]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", help="a demo model's weights (its manifest beside them)")
    parser.add_argument("--train-scenes", type=int, default=1500)
    parser.add_argument("--test-scenes", type=int, default=300)
    args = parser.parse_args()
    model = Model(load_method(args.model)[0], name="probe", device="cpu")
    train = list(generate_scenes(args.train_scenes, 0, IMAGE_SIZE, split="train", n_objects=WORLD_OBJECTS))
    test = list(generate_scenes(args.test_scenes, EVAL_SEED, IMAGE_SIZE, split="test", n_objects=WORLD_OBJECTS))
    train_x, train_y = object_rows(model, train)
    test_x, test_y = object_rows(model, test)
    tests = one_word_tests(model, test)
    seen = one_word_tests(model, train[:args.test_scenes])
    print(f"{args.model}: {args.test_scenes} held-out scenes (seed {EVAL_SEED}), probes fitted on "
          f"{args.train_scenes} training scenes")
    print(f"{'attribute':<10}{'object patches':>16}{'embedding x cell':>18}{'sentence':>10}{'caption':>9}"
          f"{'text 1-cos':>12}{'caption, trained on':>21}")
    for attribute in (*ATTRIBUTES, "position"):
        probes = [linear_probe(train_x[kind], train_y[attribute], test_x[kind], test_y[attribute])
                  if attribute in ATTRIBUTES else float("nan") for kind in ("object patches", "embedding x cell")]
        print(f"{attribute:<10}{probes[0]:>16.1f}{probes[1]:>18.1f}{tests.get(('sentence', attribute), np.nan):>10.1f}"
              f"{tests.get(('caption', attribute), np.nan):>9.1f}{tests.get(('text 1-cos', attribute), np.nan):>12.3f}"
              f"{seen.get(('caption', attribute), np.nan):>21.1f}")


if __name__ == "__main__":
    main()
