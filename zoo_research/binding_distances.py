"""How far a counterfactual twin moves a trained base's embeddings, per attribute (issue 34 diagnostic).

    OMP_NUM_THREADS=2 python zoo_research/binding_distances.py /tmp/binding/base-short-600/model.safetensors short

For 200 held-out scenes (seed 1, test split) and one twin per attribute (random object): the mean of
1 - cos(scene, twin) for the global image embedding and for the caption's text embedding (the run's caption
format), next to the same distance between two different scenes. A tower whose twin distance is near 0
does not see the change, whatever the batches ask.
"""

import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # binding_experiment, beside this file
from binding_experiment import ATTRIBUTES, EVAL_SEED, IMAGE_SIZE, WORLD_OBJECTS, counterfactual_twin, sample_of  # noqa: E402

from explorer.data.synthetic import generate_scenes  # noqa: E402
from explorer.models.io.loading import load_method  # noqa: E402
from explorer.models.model import Model  # noqa: E402


def unit(x):
    return torch.nn.functional.normalize(x.float(), dim=-1)


def main(path: str, captions: str, n: int = 200) -> dict:
    model = Model(load_method(path)[0], device="cpu")
    scenes = list(generate_scenes(n, EVAL_SEED, IMAGE_SIZE, split="test", n_objects=WORLD_OBJECTS))
    rng = np.random.default_rng(0)
    image = unit(model.encode_image([s.image for s in scenes]).cls)
    text = unit(model.encode_text([sample_of(s, captions).caption for s in scenes]).eot)
    out = {"other scene": (float(1 - (image * image.roll(1, 0)).sum(-1).mean()),
                           float(1 - (text * text.roll(1, 0)).sum(-1).mean()))}
    for attribute in ATTRIBUTES:
        twins = [counterfactual_twin(s, attribute, int(rng.integers(len(s.objects))), rng, WORLD_OBJECTS) for s in scenes]
        keep = [i for i, t in enumerate(twins) if t is not None]
        twin_image = unit(model.encode_image([twins[i].image for i in keep]).cls)
        twin_text = unit(model.encode_text([sample_of(twins[i], captions).caption for i in keep]).eot)
        out[attribute] = (float(1 - (image[keep] * twin_image).sum(-1).mean()),
                          float(1 - (text[keep] * twin_text).sum(-1).mean()))
    return out


if __name__ == "__main__":
    result = main(sys.argv[1], sys.argv[2])
    print(json.dumps({"weights": sys.argv[1], "captions": sys.argv[2],
                      "distance (image, text)": {k: [round(v, 4) for v in pair] for k, pair in result.items()}}))
