"""`explorer jobs submit | list | show | logs | cancel | resume | delete`: background training runs from
the shell, the twin of the app's Jobs tab (same store under ``$EXPLORER_HOME/jobs``, same words).

Each run is its own process: ``submit`` returns once it is queued (or started), and the run goes on
after this command ends. ``list --json`` prints one object per run with at least ``id``, ``name``,
``status`` (queued, running, done, failed, cancelled), ``pid`` and ``checkpoint`` (the output
manifest, once written); ``show --json`` the whole record. A refusal (unknown id, bad setting,
missing data) is one ``error:`` line and exit code 2, from ``explorer.cli.main``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from explorer.core.errors import ExplorerError

FOLLOW_POLL_S = 0.5


def add_commands(commands) -> None:
    from explorer.cli.task_options import add_sweep_options
    from explorer.evaluation.tasks import BOTH, task_names  # the tasks a sweep runs: one registry, no list here

    jobs = commands.add_parser("jobs", help="background training runs: submit, list, show, logs, cancel, resume, "
                                            "delete").add_subparsers(title="jobs")
    submit = jobs.add_parser("submit", help="queue a training run (it starts when a slot is free)")
    submit.add_argument("--method", required=True, help="a method (`explorer methods` lists them, plugins included)")
    submit.add_argument("--data", required=True, type=Path, help="a synthetic world, a samples.jsonl folder or any "
                                                                 "retrieval layout")
    submit.add_argument("--init", help="start from this checkpoint: a zoo name, a manifest or a weights file")
    submit.add_argument("--max-steps", type=int, help="stop after this many optimizer steps")
    submit.add_argument("--name", help="the run's name (and its zoo name when done)")
    submit.add_argument("--gpus", type=int, help="0 for CPU (default: 1 where the machine lends GPUs, else 0); "
                                                 "N > 1 runs torchrun with one process per GPU")
    submit.add_argument("--processes", type=int, metavar="N",
                        help="a CPU run on N processes (torchrun, Gloo); a GPU run has one per GPU")
    submit.add_argument("--slurm", action="store_true", help="submit it to Slurm through submitit "
                                                              "(pip install 'explorer[slurm]')")
    submit.add_argument("--partition", help="Slurm partition (with --slurm)")
    submit.add_argument("--time", help="Slurm time limit: minutes or [D-]HH:MM[:SS] (with --slurm; default 24 h)")
    submit.add_argument("--size", choices=("tiny", "base"), help="model size when starting from scratch")
    submit.add_argument("--set", action="append", default=[], dest="settings", metavar="KEY=VALUE",
                        help="override a setting of the method's config (repeat); e.g. --set batch_size=8")
    submit.add_argument("--no-start", action="store_true", help="record it as queued; start nothing now")
    submit.add_argument("--json", action="store_true", help="print the run as JSON (as `list --json` does)")
    submit.set_defaults(run=_run_submit)

    sweep = jobs.add_parser("submit-eval", help="queue an evaluation sweep: one job per (model, dataset)")
    sweep.add_argument("--model", required=True, action="extend", nargs="+", dest="models", metavar="NAME",
                       help="zoo names, manifests .json or weights files (several, or the flag repeated)")
    sweep.add_argument("--data", required=True, action="extend", nargs="+", dest="datasets", type=Path,
                       metavar="DIR", help="dataset folders, any retrieval layout (several, or the flag repeated)")
    sweep.add_argument("--task", choices=(*task_names(), BOTH), default="retrieval",
                       help="refcoco: every column of CAFT's Table 2 / SEPS's Table 4 the refer folder holds")
    add_sweep_options(sweep)  # every task's declared options, each flag once
    for flag in ("--name", "--gpus", "--processes", "--slurm", "--partition", "--time", "--no-start", "--json"):
        sweep._add_action(next(a for a in submit._actions if flag in a.option_strings))  # the same as submit's
    sweep.set_defaults(run=_run_submit_eval)

    listing = jobs.add_parser("list", help="every run with its status and progress")
    listing.add_argument("--status", choices=("queued", "running", "done", "failed", "cancelled"))
    listing.add_argument("--json", action="store_true", help="a JSON list: id, name, status, pid, checkpoint, ...")
    listing.set_defaults(run=_run_list)

    show = jobs.add_parser("show", help="a run's record, progress and final evaluation")
    show.add_argument("id", help="the run id (or its first 4+ characters)")
    show.add_argument("--json", action="store_true", help="the whole record as JSON")
    show.set_defaults(run=_run_show)

    logs = jobs.add_parser("logs", help="the run process's output")
    logs.add_argument("id")
    logs.add_argument("--tail", type=int, metavar="N", help="only the last N lines")
    logs.add_argument("--follow", "-f", action="store_true", help="keep printing until the run ends")
    logs.set_defaults(run=_run_logs)

    cancel = jobs.add_parser("cancel", help="stop a run: SIGTERM, it saves a checkpoint; SIGKILL after the grace")
    cancel.add_argument("id")
    cancel.add_argument("--grace", type=float, metavar="S", help="seconds before SIGKILL (default: the store's, 30)")
    cancel.set_defaults(run=_run_cancel)

    resume = jobs.add_parser("resume", help="queue a failed or cancelled run again, from its last checkpoint")
    resume.add_argument("id")
    resume.set_defaults(run=_run_resume)

    delete = jobs.add_parser("delete", help="forget a finished run; its checkpoint stays unless asked")
    delete.add_argument("id")
    delete.add_argument("--delete-checkpoint", action="store_true",
                        help="also delete its folder with the weights, and its zoo entry")
    delete.add_argument("--yes", "-y", action="store_true", help="do not ask")
    delete.set_defaults(run=_run_delete)


def _manager(args):
    from explorer.jobs import JobManager

    # A short-lived command adopts no orphans: the runs outlive it by design.
    return JobManager(zoo_root=args.checkpoints, subreaper=False)


def _print_json(value) -> None:
    print(json.dumps(value, indent=2, default=str))


def _run_submit(args) -> int:
    overrides = {}
    for setting in args.settings:
        key, sep, value = setting.partition("=")
        if not sep or not key.strip():
            raise ExplorerError(f"--set takes KEY=VALUE, not {setting!r}")
        overrides[key.strip()] = value.strip()
    if args.size:
        overrides["size"] = args.size
    slurm = _slurm_settings(args)
    run = _manager(args).submit(args.method, args.data, init=args.init, max_steps=args.max_steps, name=args.name,
                                gpus=args.gpus, overrides=overrides, start=not args.no_start,
                                processes=args.processes, backend="slurm" if args.slurm else "local", slurm=slurm)
    if args.json:
        _print_json(run.brief())
        return 0
    print(f"{run.id}  {run.name}  {run.status}  {run.out_dir}")
    for note in run.notes:
        print(f"  {note}")
    print(f"  follow it: explorer jobs logs {run.id} --follow")
    return 0


def _slurm_settings(args) -> dict | None:
    if (args.partition or args.time) and not args.slurm:
        raise ExplorerError("--partition and --time are Slurm settings: add --slurm")
    return {"partition": args.partition, "time": args.time} if args.slurm else None


def _run_submit_eval(args) -> int:
    from explorer.cli.task_options import sweep_values
    from explorer.jobs.sweeps import children

    options = sweep_values(args)  # typed and checked by each task's declaration when the sweep is recorded
    jobs = _manager(args)
    sweep = jobs.submit_eval(args.models, args.datasets, task=args.task, name=args.name, gpus=args.gpus,
                             processes=args.processes, backend="slurm" if args.slurm else "local",
                             slurm=_slurm_settings(args), options=options, start=not args.no_start)
    kids = children(jobs.store, sweep.id)
    if args.json:
        _print_json({**sweep.brief(), "children": [kid.brief() for kid in kids]})
        return 0
    print(f"{sweep.id}  {sweep.name}  {sweep.status}  {len(kids)} evaluation(s)")
    for kid in kids:
        print(f"  {kid.id}  {kid.name}  {kid.status}")
    print(f"  follow it: explorer jobs show {sweep.id}; the table: explorer results table --runs {sweep.id}")
    return 0


def _run_list(args) -> int:
    from explorer.views import jobs_view as view

    runs = _manager(args).list(args.status)
    if args.json:
        _print_json([run.brief() for run in runs])
        return 0
    if not runs:
        print("no runs (explorer jobs submit --method M --data DIR starts one)")
        return 0
    _print_table([view.COLUMNS, *view.run_rows(runs)])
    return 0


def _print_table(rows) -> None:
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip())


def _run_show(args) -> int:
    from explorer.views import jobs_view as view

    jobs = _manager(args)
    jobs.reconcile()  # a run whose process died is shown as it is now
    run = jobs.get(args.id)
    if args.json:
        record = run.as_dict()
        record["queue_position"] = jobs.queue_position(run.id)
        record["last_metrics"] = view.last_metrics(run.metrics_path)
        _print_json(record)
        return 0
    total = f"/{run.total_steps}" if run.total_steps else ""
    fields = [("id", run.id), ("name", run.name), ("method", run.method), ("status", run.status),
              ("progress", f"step {run.step}{total} {view.progress_text(run)}".rstrip()), ("data", run.data),
              ("init", run.init or "from scratch"), ("devices", run.describe_devices()), ("pid", run.pid),
              ("host", run.host),
              ("started", view.when(run.started)), ("finished", view.when(run.finished)),
              ("duration", view.duration(run)), ("exit code", run.describe_exit()), ("error", run.error),
              ("checkpoint", run.checkpoint), ("zoo name", run.zoo_name), ("folder", run.out_dir),
              ("log", run.log_path), ("command", " ".join(run.command))]
    for key, value in fields:
        if value not in (None, ""):
            print(f"{key:<11} {value}")
    for note in run.notes:
        print(f"{'note':<11} {note}")
    print("settings    " + ", ".join(f"{key}={view.shown(value)}" for key, value in run.config.items()))
    rows = view.evaluation_rows(run.evaluation)
    if rows:
        print(f"evaluation  {run.evaluation.get('kind')} data, split {run.evaluation.get('split')}")
        for key, value in rows:
            print(f"  {key:<32} {value}")
    else:
        print(f"evaluation  {view.evaluation_markdown(run.evaluation, run.status)}")
    return 0


def _run_logs(args) -> int:
    jobs = _manager(args)
    run = jobs.get(args.id)
    if not args.follow:
        text = jobs.logs(run.id, tail=args.tail)
        sys.stdout.write(text)
        return 0
    return _follow(jobs, run, args.tail)


def _follow(jobs, run, tail: int | None) -> int:
    """Print the log's last lines, then what is appended, until the run is final and nothing more comes."""
    from explorer.jobs.records import FINAL

    sys.stdout.write(jobs.logs(run.id, tail=20 if tail is None else tail))
    sys.stdout.flush()
    path = Path(run.log_path)
    offset = path.stat().st_size if path.is_file() else 0
    while True:
        finished = jobs.get(run.id).status in FINAL  # read before the file: its last lines are then printed
        size = path.stat().st_size if path.is_file() else 0
        if size > offset:
            with path.open("rb") as handle:
                handle.seek(offset)
                sys.stdout.write(handle.read(size - offset).decode("utf-8", errors="replace"))
                sys.stdout.flush()
            offset = size
        elif finished:
            return 0
        else:
            jobs.reconcile()  # a run that died without a word is marked, so this loop ends
            time.sleep(FOLLOW_POLL_S)


def _run_cancel(args) -> int:
    run = _manager(args).cancel(args.id, grace_s=args.grace)
    checkpoint = f"; checkpoint at step {run.step}: {run.checkpoint}" if run.checkpoint else ""
    print(f"{run.id}  {run.name}  {run.status} (exit code {run.describe_exit()}){checkpoint}")
    if run.status == "cancelled":
        print(f"  resume it: explorer jobs resume {run.id}")
    return 0


def _run_resume(args) -> int:
    run = _manager(args).resume(args.id)
    print(f"{run.id}  {run.name}  {run.status}  ({run.notes[-1] if run.notes else 'resumed'})")
    return 0


def _run_delete(args) -> int:
    from explorer.views import jobs_view as view

    jobs = _manager(args)
    run = jobs.get(args.id)
    question = view.delete_question(run, args.delete_checkpoint)
    if not args.yes:
        try:
            answer = input(f"{question} [y/N] ")
        except EOFError:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            print(f"not deleted: run {run.id} is kept (pass --yes to delete without asking)", file=sys.stderr)
            return 1
    report = jobs.delete(run.id, keep_checkpoint=not args.delete_checkpoint)
    print(view.delete_report(report, run))
    return 0


__all__ = ["add_commands"]
