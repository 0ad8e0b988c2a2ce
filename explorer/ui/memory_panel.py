"""What the server holds in memory: resident size and every bounded cache, with what it holds and its
bound. Shown in the Models tab, and read by bench/soak.py after every round."""

from __future__ import annotations

from pathlib import Path

import gradio as gr

from explorer.core.cache import live_caches


def resident_gb() -> float | None:
    """The process's resident memory in GB (Linux), else None."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024 / 1024
    except OSError:
        return None
    return None


def memory_report() -> str:
    rss = resident_gb()  # no gc.collect() here: a full collection stalls every session for ~0.2 s
    lines = [f"Resident memory: {rss:.2f} GB." if rss is not None else "Resident memory: unknown here."]
    lines += [f"- {stats.line()}" for stats in live_caches() if stats.name != "display variants of one view"]
    views = [s for s in live_caches() if s.name == "display variants of one view"]
    if views:
        lines.append(f"- display variants of {len(views)} open view(s): {sum(s.bytes for s in views) / 2**20:.1f} MB "
                     f"(each at most {views[0].max_bytes / 2**20:.0f} MB)")
    return "\n".join(lines)


def build() -> None:
    with gr.Accordion("Memory: what this server holds", open=False):
        report = gr.Markdown(elem_id="memory-report")
        button = gr.Button("Show", size="sm", elem_id="memory-show")
    button.click(memory_report, outputs=report, api_name="memory_report")
