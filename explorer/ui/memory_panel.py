"""What the server holds in memory: resident size and every bounded cache, with what it holds and its
bound. Shown in the Models tab, and read by bench/soak.py after every round."""

from __future__ import annotations

import gradio as gr

from explorer.core.cache import MB, live_caches
from explorer.core.runtime import resident_gb
from explorer.views.maps_view import DISPLAY_MEMO


def memory_report() -> str:
    rss = resident_gb()  # no gc.collect() here: a full collection stalls every session for ~0.2 s
    lines = [f"Resident memory: {rss:.2f} GB." if rss is not None else "Resident memory: unknown here."]
    caches = live_caches()
    lines += [f"- {stats.line()}" for stats in caches if stats.name != DISPLAY_MEMO]
    views = [stats for stats in caches if stats.name == DISPLAY_MEMO]  # one per open view: summed
    if views:
        lines.append(f"- {DISPLAY_MEMO}, {len(views)} open: {sum(s.bytes for s in views) / MB:.1f} MB "
                     f"(each at most {views[0].max_bytes / MB:.0f} MB)")
    return "\n".join(lines)


def build() -> None:
    with gr.Accordion("Memory: what this server holds", open=False):
        report = gr.Markdown(elem_id="memory-report")
        button = gr.Button("Show", size="sm", elem_id="memory-show")
    button.click(memory_report, outputs=report, api_name="memory_report")
