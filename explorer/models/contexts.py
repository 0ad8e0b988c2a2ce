"""The two text contexts: CLIP's 77 positions and Long-CLIP's stretch of them to 248 (no torch here).

``explorer.models.nn.positional`` writes the stretch itself: the first ``KEEP_ROWS`` rows are kept and
every later gap becomes ``STRETCH`` rows, so 4 * 77 - 3 * 20 = 248.
"""

from __future__ import annotations

KEEP_ROWS = 20
STRETCH = 4
SHORT_CONTEXT = 77
LONG_CONTEXT = STRETCH * SHORT_CONTEXT - (STRETCH - 1) * KEEP_ROWS  # 248
