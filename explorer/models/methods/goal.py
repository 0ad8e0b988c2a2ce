"""GOAL / FAST-GOAL (papers/fast-goal.txt).

Released GOAL checkpoints are Hugging Face ``CLIPModel`` state dicts whose
text position table was stretched to 248 rows with Long-CLIP's formula;
at inference the score is CLIP's global cosine. The official loader uses
``strict=False``; ours reports every missing and unexpected key.
"""

from __future__ import annotations

from ..hf_clip_layout import is_hf_clip
from ..positional import SHORT_CONTEXT
from . import register
from .clip import ClipFamily, hf_text_positions


@register
class GoalMethod(ClipFamily):
    name = "goal"
    title = "GOAL"
    detect_priority = 10

    @classmethod
    def detect(cls, tensors, raw):
        if is_hf_clip(tensors) and hf_text_positions(tensors) > SHORT_CONTEXT:
            return "goal-hf"
        return None
