"""The demo zoo's base CLIP in stages: a tower that sees, then a CLIP that reads and binds (issue 34).

Trained as CLIP is trained (InfoNCE on whole captions), the base told colour and little else: a batch's
captions are told apart by their colours alone, so nothing asks for shape, size, texture or place, and even
per-patch supervision added to that loss left shape at chance for hundreds of steps (zoo_research/results/
binding_experiment.md has every run). So the base is built as a CLIP is often built, from a backbone that
was taught to see first:

- stage "see" (``SeeingClip``): the ViT with one linear head per attribute over its patch features,
  trained with cross-entropy on the object patches of the world's pictures; a patch is labelled with the
  colour, shape, size and texture of the object that covers at least a quarter of it (the world knows
  every pixel's object). Two more heads read the pooled embedding: the attribute pairs the picture holds
  and which of the 9 cells hold an object (the attention pool learns place from it). The analogue of the
  supervised backbone a CLIP may start from (LiT, Zhai et al., CVPR 2022). The heads are training-only:
  the stage is saved as a plain CLIP.
- stage "read" (``ReadingClip``): from that tower, CLIP's InfoNCE on the long captions plus the same
  weight of a multi-positive loss of every object sentence of the batch against every picture
  (``multi_positive_nce``): an object sentence names one object's colour, shape, size, texture and
  place, and needs all of them to find its picture among the batch's.
- stage "bind" (``BindingClip``): the reading stage's losses plus NegCLIP's image -> text softmax over the
  batch's captions and the world's one-attribute negatives of each (Yuksekgonul et al., ICLR 2023), with
  the seeing stage's per-patch heads kept on (fresh heads, the same cross-entropy): without them the tower
  forgets part of what it saw while it learns to read. Published as a plain CLIP. The build runs "see",
  then "bind" from it (reading and binding at once, the recipe measured with the attention pool:
  zoo_research/results/binding_experiment.md, parts 3 and 7); "read" alone is the stage "bind" extends.
- stage "place" (``PlacingClip``, not in the build): "bind" with one more patch head, the cell of the
  patch's object, so that the patch features say where things are; "place-background"
  (``PlacingWithBackgroundClip``) scores that head on the background too, as "no object"; "place-balanced"
  (``PlacingBalancedClip``) weights the object patches and the background half and half in it (all
  measured and not taken: zoo_research/results/binding_experiment.md, parts 10 and 11).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from itertools import combinations

from explorer.data.vocabulary import COLOURS, POSITIONS, SHAPES, SIZES, TEXTURES
from explorer.models.batch import TrainingBatch
from explorer.models.methods.base import cosine_matrix
from explorer.models.methods.clip import ClipMethod
from explorer.models.nn.losses import image_to_text_with_negatives, info_nce_pairs, multi_positive_nce

# The attributes a patch is labelled with; class 0 of each is "no object" (those patches are not scored).
PATCH_ATTRIBUTES: dict[str, tuple[str, ...]] = {"colour": tuple(COLOURS), "shape": SHAPES, "size": tuple(SIZES),
                                                "texture": TEXTURES}
PATCH_TARGETS = "patch_attributes"  # the batch's extras key: [B, len(PATCH_ATTRIBUTES), grid * grid] long
# Every pair of an object's attributes (colour x shape, shape x position, ...): which pairs a picture holds.
OBJECT_ATTRIBUTES: dict[str, tuple[str, ...]] = {**PATCH_ATTRIBUTES, "position": POSITIONS}
ATTRIBUTE_PAIRS = tuple(combinations(OBJECT_ATTRIBUTES, 2))
PAIR_OFFSETS = np.cumsum([0] + [len(OBJECT_ATTRIBUTES[a]) * len(OBJECT_ATTRIBUTES[b]) for a, b in ATTRIBUTE_PAIRS])
PAIR_TARGETS = "attribute_pairs"  # the batch's extras key: [B, PAIR_OFFSETS[-1]] float, 1 where the picture has it
OCCUPANCY_TARGETS = "occupancy"  # the batch's extras key: [B, len(POSITIONS)] float, 1 where a cell holds an object
COVER = 0.25  # share of a patch an object must cover to label it


def patch_attributes(scene, grid: int, attributes: dict = PATCH_ATTRIBUTES) -> torch.Tensor:
    """[len(attributes), grid * grid] long: per patch (row-major), each attribute's value index + 1 of the
    object covering most of its object pixels, at least ``COVER`` of the patch; 0 where no object does."""
    labels = scene.labels  # [H, W] 0 background, k + 1 object k
    side = labels.shape[0] // grid
    blocks = labels[:grid * side, :grid * side].reshape(grid, side, grid, side).transpose(0, 2, 1, 3)
    blocks = blocks.reshape(grid * grid, side * side)
    n_labels = len(scene.objects) + 1
    counts = np.stack([np.bincount(block, minlength=n_labels) for block in blocks])[:, 1:]  # object pixels
    owner = np.where(counts.max(axis=1) >= COVER * side * side, counts.argmax(axis=1) + 1, 0)
    out = np.zeros((len(attributes), grid * grid), dtype=np.int64)
    for a, (attribute, values) in enumerate(attributes.items()):
        table = np.array([0] + [values.index(getattr(o, attribute)) + 1 for o in scene.objects])
        out[a] = table[owner]
    return torch.as_tensor(out)


def occupancy(scene) -> torch.Tensor:
    """[len(POSITIONS)] float: 1 for each of the 9 cells an object of the scene is placed in."""
    out = torch.zeros(len(POSITIONS))
    for obj in scene.objects:
        out[POSITIONS.index(obj.position)] = 1.0
    return out


def attribute_pairs(scene) -> torch.Tensor:
    """[PAIR_OFFSETS[-1]] float multi-hot: for every pair of attributes, the value pairs of the scene's objects."""
    out = torch.zeros(int(PAIR_OFFSETS[-1]))
    for obj in scene.objects:
        for offset, (a, b) in zip(PAIR_OFFSETS, ATTRIBUTE_PAIRS):
            i = OBJECT_ATTRIBUTES[a].index(getattr(obj, a))
            j = OBJECT_ATTRIBUTES[b].index(getattr(obj, b))
            out[offset + i * len(OBJECT_ATTRIBUTES[b]) + j] = 1.0
    return out


def patch_heads(arch, attributes: dict = PATCH_ATTRIBUTES) -> nn.ModuleList:
    """One linear head per attribute over the patch features (class 0: no object)."""
    return nn.ModuleList(nn.Linear(arch.embed_dim, len(values) + 1) for values in attributes.values())


def patch_losses(heads: nn.ModuleList, patches: torch.Tensor, targets: torch.Tensor, prefix: str = "",
                 attributes: dict = PATCH_ATTRIBUTES, everywhere: tuple[str, ...] = (),
                 balanced: bool = False) -> dict[str, torch.Tensor]:
    """Per attribute, cross-entropy of its head over the patches an object covers (``targets``: [B, A, P],
    ``patch_attributes``'s); the patches no object covers are not scored, except by the heads ``everywhere``
    names, for which "no object" (class 0) is a class like the others: their mean over every patch, or with
    ``balanced`` half the mean over the object patches plus half the mean over the background (about 84 %
    of the demo world's patches, which otherwise make most of the loss "object or not")."""
    targets = targets.to(patches.device)
    out = {}
    for a, (attribute, head) in enumerate(zip(attributes, heads)):
        logits, target = head(patches), targets[:, a]
        if attribute in everywhere and balanced:
            on_object = target > 0
            out[prefix + attribute] = 0.5 * (F.cross_entropy(logits[on_object], target[on_object])
                                             + F.cross_entropy(logits[~on_object], target[~on_object]))
            continue
        scored = torch.ones_like(target, dtype=torch.bool) if attribute in everywhere else target > 0
        out[prefix + attribute] = F.cross_entropy(logits[scored], target[scored])
    return out


class SeeingClip(ClipMethod):
    """Stage "see": the image tower and per-patch attribute heads, trained on the object patches."""

    new_module_prefixes = ("attribute_heads.", "pair_head.", "occupancy_head.")
    patch_labels = PATCH_ATTRIBUTES  # what the patch heads are taught

    def __init__(self, arch, **extra):
        super().__init__(arch, **extra)
        self.attribute_heads = patch_heads(arch)
        self.pair_head = nn.Linear(arch.embed_dim, int(PAIR_OFFSETS[-1]))
        self.occupancy_head = nn.Linear(arch.embed_dim, len(POSITIONS))

    def losses(self, batch: TrainingBatch) -> dict[str, torch.Tensor]:
        """Per attribute, cross-entropy of its head over the patches an object covers; and, from the pooled
        embedding, which attribute pairs the picture holds and which of the 9 cells hold an object (binary
        cross-entropy, multi-label): the image embedding itself, not only its patches, must carry each
        object's attributes together, and where things are."""
        image = self.encode_image(batch.pixels)
        out = patch_losses(self.attribute_heads, image.patches, batch.extras[PATCH_TARGETS])
        if PAIR_TARGETS in batch.extras:
            pairs = batch.extras[PAIR_TARGETS].to(image.cls.device)
            out["attribute pairs"] = F.binary_cross_entropy_with_logits(self.pair_head(image.cls), pairs)
        if OCCUPANCY_TARGETS in batch.extras:
            cells = batch.extras[OCCUPANCY_TARGETS].to(image.cls.device)
            out["occupancy"] = F.binary_cross_entropy_with_logits(self.occupancy_head(image.cls), cells)
        return out

    @torch.no_grad()
    def patch_accuracy(self, pixels: torch.Tensor, targets: torch.Tensor, pairs: torch.Tensor,
                       cells: torch.Tensor | None = None) -> dict[str, float]:
        """The stage's learning curve: per attribute, the share of object patches its head gets right;
        "pairs": the share of a picture's attribute pairs among its n highest pair scores (n: how many it has);
        "occupancy": the share of the 9 cells whose occupancy the pooled embedding's head gets right."""
        image = self.encode_image(pixels)
        targets, pairs = targets.to(image.patches.device), pairs.to(image.patches.device)  # extras stay on the CPU
        cells = None if cells is None else cells.to(image.patches.device)
        out = {attribute: float((head(image.patches).argmax(-1) == targets[:, a])[targets[:, a] > 0].float().mean())
               for a, (attribute, head) in enumerate(zip(PATCH_ATTRIBUTES, self.attribute_heads))}
        scores, found = self.pair_head(image.cls), []
        for row, truth in zip(scores, pairs.bool()):
            top = row.topk(int(truth.sum())).indices
            found.append(float(truth[top].float().mean()))
        out["pairs"] = float(np.mean(found))
        if cells is not None:
            out["occupancy"] = float(((self.occupancy_head(image.cls) > 0) == cells.bool()).float().mean())
        return out


class ReadingClip(ClipMethod):
    """Stage "read": CLIP's InfoNCE on the captions plus every object sentence (``batch.sentences``) against
    every picture of the batch, multi-positive."""

    def losses(self, batch: TrainingBatch) -> dict[str, torch.Tensor]:
        batch.require("sentences", method="the demo base's reading stage")
        features = self.encode_image(batch.pixels)
        image = F.normalize(features.cls, dim=-1)
        scale = self.logit_scale.exp()
        captions = F.normalize(self.encode_captions(batch.captions).eot, dim=-1)
        texts = [text for sentences in batch.sentences for text in sentences]
        owner = torch.tensor([i for i, sentences in enumerate(batch.sentences) for _ in sentences],
                             device=image.device)
        sentences = self.encode_captions(texts).eot
        # CLIP's own term as ClipFamily.losses computes it (the global batch under DDP)
        contrastive = info_nce_pairs(image, captions, lambda rows, columns: scale * rows @ columns.T)
        return {"contrastive": contrastive,
                "object sentences": multi_positive_nce(scale * cosine_matrix(image, sentences), owner),
                **self.more_losses(batch, image, captions, scale, features)}

    def more_losses(self, batch, image, captions, scale, features) -> dict[str, torch.Tensor]:
        """A later stage's terms on the same features (normalised image and caption embeddings; the image
        tower's ``features``, its patches among them)."""
        return {}


class BindingClip(ReadingClip):
    """Stage "bind": the reading stage's losses plus NegCLIP's (Yuksekgonul et al., ICLR 2023) on the world's
    one-attribute negatives (``batch.negative_captions``: the caption with one object's colour, shape, size,
    texture or place changed). Run as NegCLIP is, a fine-tune of a CLIP that reads: the reading stage's
    batches need colour alone to tell captions apart; a negative one word away needs the changed word.

    The seeing stage's patch cross-entropy stays on (fresh heads, ``patch_losses``) when the batch carries the
    patch labels: binding alone let the tower forget shape (a probe read it from 76 % of objects' patches
    after seeing, 59-69 % after binding), and with them the binding stage ends higher on shape and size
    (docs/demo-zoo-choices.md)."""

    new_module_prefixes = ("attribute_heads.",)
    patch_labels = PATCH_ATTRIBUTES  # what the patch heads are taught
    scored_everywhere: tuple[str, ...] = ()  # heads also scored on the background ("no object")
    balanced = False  # those heads: half object patches, half background (``patch_losses``)

    def __init__(self, arch, **extra):
        super().__init__(arch, **extra)
        self.attribute_heads = patch_heads(arch, self.patch_labels)

    def more_losses(self, batch, image, captions, scale, features) -> dict[str, torch.Tensor]:
        batch.require("negative_captions", method="the demo base's binding stage")
        out = (patch_losses(self.attribute_heads, features.patches, batch.extras[PATCH_TARGETS], prefix="patch ",
                            attributes=self.patch_labels, everywhere=self.scored_everywhere, balanced=self.balanced)
               if PATCH_TARGETS in batch.extras else {})
        negatives = [n for caption, rewritten in zip(batch.captions, batch.negative_captions)
                     for n in self.read_apart(caption, rewritten)]
        if not negatives:  # every change past the context: nothing to tell apart
            return {"hard negatives": image.sum() * 0, **out}
        negative = F.normalize(self.encode_captions(negatives).eot, dim=-1)
        return {"hard negatives": image_to_text_with_negatives(scale * image @ captions.T,
                                                               scale * image @ negative.T), **out}

    def read_apart(self, caption: str, rewritten: list[str]) -> list[str]:
        """The negatives this model reads apart from ``caption``: a change past the context's cut reads as the
        caption itself, and would be a "negative" equal to the positive."""
        own, *read = self.ids_read([caption, *rewritten])
        return [text for text, ids in zip(rewritten, read) if ids != own]


class PlacingClip(BindingClip):
    """Stage "place": the binding stage with one more patch head, the cell of the object a patch shows."""

    patch_labels = OBJECT_ATTRIBUTES


class PlacingWithBackgroundClip(PlacingClip):
    """Stage "place-background": the place head also scored on the patches no object covers, as "no object",
    so that it keeps place off the background (part 10: the base's generic map points far better)."""

    scored_everywhere = ("position",)


class PlacingBalancedClip(PlacingWithBackgroundClip):
    """Stage "place-balanced": "place-background" with the object patches and the background weighted half
    and half in the place head's loss (part 11: place reached the object patches only partly without it)."""

    balanced = True


STAGES = {"see": SeeingClip, "read": ReadingClip, "bind": BindingClip, "place": PlacingClip,
          "place-background": PlacingWithBackgroundClip, "place-balanced": PlacingBalancedClip}
READING_STAGES = ("read", "bind", "place", "place-background", "place-balanced")  # train on the object sentences
BINDING_STAGES = READING_STAGES[1:]  # ... and the world's one-attribute negatives, with the patch heads on


def as_stage(stage: str, method: ClipMethod) -> ClipMethod:
    """``method``'s weights in the stage's training class (its heads, if any, freshly made)."""
    trainer = STAGES[stage](method.arch, **method.extra_config)
    missing, unexpected = trainer.load_state_dict(method.state_dict(), strict=False)
    assert not unexpected and all(k.startswith(trainer.new_module_prefixes) for k in missing), (missing, unexpected)
    return trainer


def as_clip(method: ClipMethod) -> ClipMethod:
    """A stage's weights as a plain CLIP (training heads dropped)."""
    clip = ClipMethod(method.arch, **method.extra_config)
    state = {k: v for k, v in method.state_dict().items() if not k.startswith(SeeingClip.new_module_prefixes)}
    clip.load_state_dict(state)  # strict: every CLIP weight
    return clip
