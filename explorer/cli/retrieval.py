"""`explorer index | search | eval-retrieval`: retrieval datasets embedded, searched and measured."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from explorer.cli.common import add_evaluation_command, add_precision_argument, model_loader, zoo_from_args
from explorer.core.errors import CaptionError, ExplorerError


def add_commands(commands) -> None:
    from explorer.evaluation.tasks.retrieval import OPTIONS

    _add_retrieval_arguments(commands.add_parser("index", help="embed a retrieval dataset into the cache"), True,
                             _run_index)
    search = commands.add_parser("search", help="the top k of a retrieval dataset for a text or a picture")
    _add_retrieval_arguments(search, False, _run_search)
    query = search.add_mutually_exclusive_group(required=True)
    query.add_argument("--text", help="find pictures for this text (a dataset caption has its picture as truth)")
    query.add_argument("--image", type=Path, help="find captions for this picture file")
    query.add_argument("--image-index", type=int, metavar="N", help="find captions for the dataset's picture N "
                                                                     "(0-based; its captions are the truth)")
    search.add_argument("--k", type=int, default=10, help="results shown (default 10)")
    search.add_argument("--json", action="store_true", help="print one JSON object")
    retrieval = commands.add_parser("eval-retrieval", help="Recall@K both ways on a retrieval dataset; write JSON")
    retrieval.set_defaults(run=_run_eval_retrieval)
    add_evaluation_command(retrieval, OPTIONS, data_help=DATA_HELP, resumable=False)


DATA_HELP = "the dataset: a folder (or index file) in one of the layouts (docci, urban1k, karpathy, folder, ...)"


def _add_retrieval_arguments(parser: argparse.ArgumentParser, several: bool, run) -> None:
    """``index`` and ``search``: a model, the dataset and how it is read (the retrieval task's ``READING``)."""
    from explorer.cli.task_options import add_task_options
    from explorer.evaluation.tasks.options import ALLOW_PICKLE
    from explorer.evaluation.tasks.retrieval import READING

    parser.set_defaults(run=run)
    parser.add_argument("--model", required=True, metavar="NAME", help="zoo name, manifest .json or weights file"
                        + ("; repeat for several" if several else ""),
                        **({"action": "append", "dest": "models"} if several else {}))
    parser.add_argument("--data", type=Path, required=True, help=DATA_HELP)
    add_task_options(parser, (*READING, ALLOW_PICKLE))
    parser.add_argument("--device", default="auto")
    add_precision_argument(parser, "fp32")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _retrieval_set(args):
    from explorer.evaluation.retrieval import read_evaluation_set

    return read_evaluation_set(args.data, split=args.split, layout=args.layout, limit=args.limit)


def _retrieval_models(args, names):
    """A loader of ``names``, each checked first: an unknown name fails before anything is embedded."""
    zoo = zoo_from_args(args)
    for name in names:
        if not Path(name).expanduser().exists():
            zoo.get(name)  # an unknown name raises ManifestError: "No model named ...; known: ..."
    return model_loader(args, zoo)


def _indexed(args, model, name: str, dataset, always: bool = False):
    """The store of ``model`` on ``dataset``, embedding what the cache lacks (a bar on stderr: images, captions)."""
    from tqdm import tqdm

    from explorer.retrieval.embedding_store import EmbeddingStore

    store = EmbeddingStore(model, dataset)
    if always or not store.status().complete:
        if not always:
            print(f"{name}: the cache is incomplete; embedding first", file=sys.stderr)
        with tqdm(file=sys.stderr, leave=False, disable=args.no_progress, dynamic_ncols=True) as bar:
            def progress(done: int, total: int, phase: str) -> None:
                if getattr(bar, "phase", None) != phase:
                    bar.phase = phase
                    bar.reset(total=total)
                    bar.set_description(f"{name}: {phase}")
                bar.n = done
                bar.refresh()

            store.update(progress=progress)
    return store


def _print_skipped(items, notes, reason: str = "") -> None:
    """What was left out, counted by reason (all as ``reason`` when given), with the first few examples;
    then the notes."""
    from explorer.data.retrieval_sets.base import skipped_by_reason

    counts = ({reason: len(items)} if reason else skipped_by_reason(items)) if items else {}
    if counts:
        print("skipped: " + ", ".join(f"{n} {why}" for why, n in counts.items())
              + "".join(f"\n  {item.item}: {item.reason}" for item in items[:5]))
    print("".join(f"note: {note}\n" for note in notes), end="")


def _run_index(args) -> int:
    dataset = _retrieval_set(args)
    load = _retrieval_models(args, args.models)
    print(dataset.summary())
    _print_skipped(dataset.skipped, dataset.notes)
    for name in args.models:
        status = _indexed(args, load(name), name, dataset, always=True).status()
        print(f"{name}: {status.line()}")
        _print_skipped(status.failed, status.notes, "unreadable")
    return 0


def _run_search(args) -> int:
    from explorer.core.images import load_image
    from explorer.retrieval.search import Searcher

    if args.text is not None and not args.text.strip():
        raise CaptionError("the query is empty: give --text some words (or search with --image)")
    if args.k < 1:
        raise ExplorerError(f"--k must be at least 1, not {args.k}")
    picture = load_image(args.image).image if args.image is not None else None  # unreadable: said before any work
    dataset, n = _retrieval_set(args), args.image_index
    if n is not None and not 0 <= n < len(dataset.images):  # said before a model is loaded
        raise ExplorerError(f"--image-index {n}: the dataset's pictures are 0..{len(dataset.images) - 1}")
    model = _retrieval_models(args, [args.model])(args.model)
    store = _indexed(args, model, args.model, dataset)
    searcher = Searcher(model, store)
    usable = searcher.dataset
    if args.text is not None:
        result, query = searcher.text(args.text, args.k), {"text": args.text}
    elif picture is not None:
        result, query = searcher.image(picture, args.k), {"image": str(args.image)}
    else:
        result = searcher.image(store.usable_index(n), args.k)
        query = {"image": str(dataset.images[n]), "image_index": n}
    t2i = result.direction == "t2i"
    hits = [{"rank": rank, "index": hit.index, "score": hit.score, "cosine": hit.cosine,
             **({"path": str(usable.images[hit.index])} if t2i else {"caption": usable.captions[hit.index]}),
             "truth": hit.is_truth} for rank, hit in enumerate(result.hits, 1)]
    notes = store.status().notes + result.notes
    if args.json:
        print(json.dumps({"model": args.model, "query": query, "direction": result.direction,
                          "score": result.score_label, "hits": hits, "truth_rank": result.truth_rank,
                          "truth_in_shortlist": result.truth_in_shortlist, "gallery": result.gallery,
                          "notes": notes}, indent=2))
        return 0
    print(f"{args.model}: top {len(hits)} of {result.gallery} {'pictures' if t2i else 'captions'} by "
          f"{result.score_label} ({dataset.layout}, {dataset.split}); * = ground truth")
    for hit in hits:
        shown = hit["path"] if t2i else hit["caption"] if len(hit["caption"]) <= 100 else hit["caption"][:97] + "..."
        print(f"{hit['rank']:>4}  {hit['score']:+.4f}  {'*' if hit['truth'] else ' '} {shown}")
    if result.truth_rank is not None:
        print(f"truth: rank {result.truth_rank} of {result.gallery}" + ("" if result.truth_in_shortlist else
                                                                    " (by global cosine: outside the shortlist)"))
    elif args.text is not None:
        print("truth: none (the query is not one of the dataset's captions)")
    print("".join(f"note: {note}\n" for note in notes), end="")
    return 0


def _run_eval_retrieval(args) -> int:
    from explorer.cli.task_options import task_values
    from explorer.core.files import write_text_atomic
    from explorer.evaluation.retrieval import (DEFAULT_KS, evaluate_retrieval, results_document, results_rows,
                                               write_results_csv)
    from explorer.evaluation.tasks.retrieval import OPTIONS
    from explorer.retrieval.search import DEFAULT_SHORTLIST

    values = task_values(args, OPTIONS)  # every K and the shortlist at least 1: said before any work
    ks = sorted(set(values["ks"] or DEFAULT_KS))
    shortlist = values["shortlist"] or DEFAULT_SHORTLIST
    dataset = _retrieval_set(args)
    load = _retrieval_models(args, args.models)
    entries = {}
    for name in args.models:
        store = _indexed(args, load(name), name, dataset)
        entries[name] = evaluate_retrieval(store.model, store, ks, shortlist=shortlist, queries=values["queries"])
        usable = store.usable_set()
    results = results_document(usable, ks, entries)
    results["precision"] = {name: load(name).precision for name in args.models}  # what each model computed in
    write_text_atomic(args.out, json.dumps(results, indent=2))
    print(usable.summary())
    shown = [k for k in ks if k in (1, 5, 10)] or ks[:3]
    table = [["model", *(f"t2i R@{k}" for k in shown), *(f"i2t R@{k}" for k in shown), "t2i MedR", "i2t MedR",
              "RSUM", "captions cut"]]
    table += [[row["model"], *(f"{100 * row[f'{way}_R@{k}']:.1f}" for way in ("t2i", "i2t") for k in shown),
               f"{row['t2i_median_rank']:g}", f"{row['i2t_median_rank']:g}", f"{row['rsum']:.1f}",
               f"{row['captions_cut']}/{entries[row['model']]['truncation']['captions']}"]
              for row in results_rows(results, ks)]
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    for line in table:
        print("  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(line, widths))))
    print("".join(f"{name}: {e['truncation']['summary']}\n" for name, e in entries.items()), end="")
    print(f"wrote {args.out}")
    if args.csv:
        write_results_csv(results, args.csv, ks)
        print(f"wrote {args.csv}")
    return 0
