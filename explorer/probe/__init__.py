"""The swap probe: what one word changes in each model's score and map.

    from explorer.probe import swap_scores
    record = swap_scores(models, "cat.png", sentence, "red", ["blue", "green"])   # None: every other colour
    record.to_json()   # {"sentence", "word", "models": [{"name", "original_score", "swaps": [...]}]}

    vocabulary   the swap types and their words (the synthetic world's and everyday English), ``word_type``
    text         words of a sentence, the swappable ones, the swapped sentence, spans (linear, bounded)
    swaps        ``swap_scores``: per model, per swap: score, margin, noticed, map IoU, peak shift
    spans        a map for any span of a sentence's words; the object a swapped word names
    world        every scene of a synthetic world through every swap type; eval's hard negatives as swaps
"""

from explorer.probe.spans import SpanMap, named_object, span_maps
from explorer.probe.swaps import MAX_SWAPS, MapShift, ModelSwaps, Swap, SwapScores, compare_maps, plan_swaps, swap_scores
from explorer.probe.text import SwapError, find_word, pick_sentence, span_text, swap_text, swappable
from explorer.probe.vocabulary import SWAP_TYPES, TYPE_NAMES, alternatives, word_type

__all__ = ["MAX_SWAPS", "MapShift", "ModelSwaps", "SWAP_TYPES", "SpanMap", "Swap", "SwapError", "SwapScores",
           "TYPE_NAMES", "alternatives", "compare_maps", "find_word", "named_object", "pick_sentence", "plan_swaps", "span_maps",
           "span_text", "swap_scores", "swap_text", "swappable", "word_type"]
