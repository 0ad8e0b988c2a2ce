"""The numbers of every evaluation, as pure functions on arrays (numpy arrays or tensors; no model, no file):

    maps            a map against its truth mask: IoU, pointing game, pixel AUROC, Otsu masks, score_maps
    boxes           a box a map picks (ReCLIP's rule), box IoU, FLISM's region accuracy
    retrieval       Recall@K both ways, ranks, RSUM
    classification  a true caption against its hard negatives

The evaluation libraries (``real_grounding``, ``retrieval``, ``negatives``, ``zeroshot``, ``runner``) and the
page's views score through these; nothing else computes a metric.
"""
