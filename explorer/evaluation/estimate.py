"""What `explorer eval` will score, and about how long it takes, said before it starts; and `--quick`, a
documented smaller share of the benchmark for a first look (issue 58, part 9).

The estimate is per model: seconds per retrieval scene (encode the picture, score its long and short caption
and its hard negatives) and per grounding scene (every map kind of each object sentence, and FLISM), measured
for the demo zoo's models (ViT of width 256, 224 px) on 2 CPU cores, plus loading. A larger model, or a busy
machine, takes longer; results.json records what each phase took (``seconds``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# --quick: the first 60 scenes for retrieval and hard negatives, the first 6 for grounding and FLISM (the default
# is 300 and 80): under 2 minutes for two demo models on 2 cores, its numbers noisier than the full run's.
QUICK_LIMIT = 60
QUICK_GROUNDING_LIMIT = 6
# Seconds per model for a demo-size model on 2 CPU cores (docs/plugins.md, "A first look"): the full run of two
# demo models took 9.2 min (300 + 80 scenes); --quick's phases (results.json "seconds") give the split between
# retrieval scenes (encode, score, hard negatives: ~0.05 s) and grounding scenes (every map kind of each object
# sentence, FLISM: ~3.2 s).
SECONDS_PER_RETRIEVAL_SCENE = 0.05
SECONDS_PER_GROUNDING_SCENE = 3.2
SECONDS_TO_LOAD = 3.0


@dataclass(frozen=True)
class EvalPlan:
    models: list[str]
    retrieval_scenes: int
    grounding_scenes: int
    quick: bool = False
    # Forwards per model for retrieval and hard negatives, as the runner makes them: each picture once; the long
    # and short captions, then each scene's hard negatives (its long caption's score is retrieval's), those out of
    # its reach left out by the run (0: not counted).
    picture_forwards: int = 0
    text_forwards: int = 0

    @property
    def seconds(self) -> float:
        """Estimated wall seconds for demo-size models on 2 CPU cores."""
        per_model = (SECONDS_TO_LOAD + SECONDS_PER_RETRIEVAL_SCENE * self.retrieval_scenes
                     + SECONDS_PER_GROUNDING_SCENE * self.grounding_scenes)
        return per_model * len(self.models)

    def line(self) -> str:
        share = " (--quick: a first look; drop it for the full benchmark)" if self.quick else ""
        forwards = (f" ({self.picture_forwards} picture and at most {self.text_forwards} text forwards a model for "
                    "retrieval and hard negatives)" if self.text_forwards else "")
        return (f"scoring {len(self.models)} model(s) ({', '.join(self.models)}) on {self.retrieval_scenes} scenes "
                f"for retrieval and hard negatives{forwards} and the first {self.grounding_scenes} for grounding and "
                f"FLISM{share}; estimate {_minutes(self.seconds)} for demo-size models on 2 CPU cores (larger models "
                "and busy machines take longer)")


def plan_eval(zoo_root, data_dir, split: str, limit: int, grounding_limit: int, models=None,
              quick: bool = False) -> EvalPlan:
    """The models and scene counts ``evaluate_zoo`` will score with these arguments."""
    from explorer.data import read_dataset
    from explorer.zoo import Zoo

    scenes = read_dataset(Path(data_dir), split)[:limit]
    names = [m.name for m in Zoo(zoo_root).manifests()] if models is None else list(models)
    with_negatives = [s for s in scenes if s.hard_negatives]
    texts = 2 * len(scenes) + sum(len(s.hard_negatives) for s in with_negatives)
    return EvalPlan(models=names, retrieval_scenes=len(scenes), grounding_scenes=min(len(scenes), grounding_limit),
                    quick=quick, picture_forwards=len(scenes), text_forwards=texts)


def _minutes(seconds: float) -> str:
    return f"about {seconds:.0f} s" if seconds < 90 else f"about {seconds / 60:.0f} min"


__all__ = ["QUICK_GROUNDING_LIMIT", "QUICK_LIMIT", "EvalPlan", "plan_eval"]
