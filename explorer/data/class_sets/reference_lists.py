"""Fixed lists the official zero-shot code classifies with, carried here as data (facts, not code).

- ``CIFAR_TEMPLATES``: the 18 prompt templates CLIP used for CIFAR-10 and CIFAR-100 (openai/CLIP,
  ``data/prompts.md``, sections CIFAR10 and CIFAR100; clip_benchmark's ``cifar10`` and ``cifar100`` entries of
  ``clip_benchmark/datasets/en_zeroshot_classification_templates.json`` hold the same 18, ``{c}`` for ``{}``).
- ``IMAGENET_O_WNIDS``: the 200 ImageNet classes ImageNet-O is classified among, in ImageNet's (sorted) order:
  clip_benchmark's ``imagenet_o_wnids`` in ``clip_benchmark/datasets/builder.py``, which keeps the ImageNet-1k
  class names of exactly these WordNet ids, whatever folders the copy on disk holds.
"""

from __future__ import annotations

CIFAR_TEMPLATES = (
    "a photo of a {}.", "a blurry photo of a {}.", "a black and white photo of a {}.", "a low contrast photo of a {}.",
    "a high contrast photo of a {}.", "a bad photo of a {}.", "a good photo of a {}.", "a photo of a small {}.",
    "a photo of a big {}.", "a photo of the {}.", "a blurry photo of the {}.", "a black and white photo of the {}.",
    "a low contrast photo of the {}.", "a high contrast photo of the {}.", "a bad photo of the {}.",
    "a good photo of the {}.", "a photo of the small {}.", "a photo of the big {}.",
)

IMAGENET_O_WNIDS = (
    "n01443537", "n01704323", "n01770081", "n01784675", "n01819313", "n01820546", "n01910747", "n01917289", "n01968897",
    "n02074367", "n02317335", "n02319095", "n02395406", "n02454379", "n02606052", "n02655020", "n02666196", "n02672831",
    "n02730930", "n02777292", "n02783161", "n02786058", "n02787622", "n02791270", "n02808304", "n02817516", "n02841315",
    "n02865351", "n02877765", "n02892767", "n02906734", "n02910353", "n02916936", "n02948072", "n02965783", "n03000134",
    "n03000684", "n03017168", "n03026506", "n03032252", "n03075370", "n03109150", "n03126707", "n03134739", "n03160309",
    "n03196217", "n03207743", "n03218198", "n03223299", "n03240683", "n03271574", "n03291819", "n03297495", "n03314780",
    "n03325584", "n03344393", "n03347037", "n03372029", "n03376595", "n03388043", "n03388183", "n03400231", "n03445777",
    "n03457902", "n03467068", "n03482405", "n03483316", "n03494278", "n03530642", "n03544143", "n03584829", "n03590841",
    "n03598930", "n03602883", "n03649909", "n03661043", "n03666591", "n03676483", "n03692522", "n03706229", "n03717622",
    "n03720891", "n03721384", "n03724870", "n03729826", "n03733131", "n03733281", "n03742115", "n03786901", "n03788365",
    "n03794056", "n03804744", "n03814639", "n03814906", "n03825788", "n03840681", "n03843555", "n03854065", "n03857828",
    "n03868863", "n03874293", "n03884397", "n03891251", "n03908714", "n03920288", "n03929660", "n03930313", "n03937543",
    "n03942813", "n03944341", "n03961711", "n03970156", "n03982430", "n03991062", "n03995372", "n03998194", "n04005630",
    "n04023962", "n04033901", "n04040759", "n04067472", "n04074963", "n04116512", "n04118776", "n04125021", "n04127249",
    "n04131690", "n04141975", "n04153751", "n04154565", "n04201297", "n04204347", "n04209133", "n04209239", "n04228054",
    "n04235860", "n04243546", "n04252077", "n04254120", "n04258138", "n04265275", "n04270147", "n04275548", "n04330267",
    "n04332243", "n04336792", "n04347754", "n04371430", "n04371774", "n04372370", "n04376876", "n04409515", "n04417672",
    "n04418357", "n04423845", "n04429376", "n04435653", "n04442312", "n04482393", "n04501370", "n04507155", "n04525305",
    "n04542943", "n04554684", "n04557648", "n04562935", "n04579432", "n04591157", "n04597913", "n04599235", "n06785654",
    "n06874185", "n07615774", "n07693725", "n07695742", "n07697537", "n07711569", "n07714990", "n07715103", "n07716358",
    "n07717410", "n07718472", "n07720875", "n07742313", "n07745940", "n07747607", "n07749582", "n07753275", "n07753592",
    "n07754684", "n07768694", "n07836838", "n07871810", "n07873807", "n07880968", "n09229709", "n09472597", "n12144580",
    "n12267677", "n13052670",
)

__all__ = ["CIFAR_TEMPLATES", "IMAGENET_O_WNIDS"]
