"""The evaluation tasks declare their options once (explorer/evaluation/tasks/): the eval-* commands,
`jobs submit-eval`, the sweep's checks and the Jobs tab's sweep form are all built from those declarations."""

from __future__ import annotations

import argparse

import pytest

from explorer.cli import _parser
from explorer.core.errors import InputError
from explorer.evaluation.tasks import TASKS, get_task, sweep_help, sweep_options, task_names
from explorer.evaluation.tasks.options import Option

COMMANDS = {"eval-retrieval": "retrieval", "eval-grounding": "grounding", "eval-negatives": "negatives",
            "eval-zeroshot": "zeroshot", "eval": "synthetic"}


def subparser(*path: str) -> argparse.ArgumentParser:
    parser = _parser()
    for name in path:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
        parser = action.choices[name]
    return parser


def flags(parser) -> dict[str, argparse.Action]:
    return {flag: action for action in parser._actions for flag in action.option_strings}  # noqa: SLF001


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_command_takes_its_tasks_options_as_declared(command):
    """Every declared option is a flag of its command, with the declaration's help and destination: the command
    spells none of them itself."""
    taken = flags(subparser(command))
    for option in get_task(COMMANDS[command]).options:
        action = taken[option.command_flag]
        assert (action.dest, action.help) == (option.name, option.help), option.name


def test_submit_eval_and_the_sweep_form_take_every_sweep_tasks_options():
    from explorer.views import jobs_view  # the form's fields (ui/compare_tab draws one per option)

    assert set(task_names()) == {"retrieval", "grounding", "refcoco", "negatives", "zeroshot"}
    taken = flags(subparser("jobs", "submit-eval"))
    for option in sweep_options():
        assert taken[option.submit_flag].dest == option.name
        assert taken[option.submit_flag].help == sweep_help(option.name)
    form = {option.name for option in jobs_view.FORM_OPTIONS}
    assert {"dataset", "split_by", "proposals", "layout", "split", "box_alpha", "region", "class_set"} <= form
    assert form == {option.name for option in sweep_options()} - {"allow_pickle"}  # never unpickling from the page
    assert "--splits" in taken and taken["--split"].dest == "split"  # negatives' --split is --splits in a sweep


class Roots:
    def path(self, value, what):
        return f"/allowed/{value}"


def test_the_forms_fields_become_the_sweeps_options():
    from explorer.views.jobs_view import FORM_OPTIONS, form_options

    given = {"split": " val ", "limit": 3.0, "proposals": "dets.json", "kinds": "generic gradcam", "queries": True,
             "region": None, "units": ""}
    options = form_options(Roots(), [given.get(option.name) for option in FORM_OPTIONS])
    assert options == {"split": "val", "limit": 3, "proposals": "/allowed/dets.json", "kinds": "generic gradcam"}
    assert form_options(Roots(), [False if o.name == "queries" else None for o in FORM_OPTIONS]) == {"queries": False}


def test_a_sweep_help_names_the_tasks_that_read_the_option():
    assert sweep_help("proposals").startswith("grounding, refcoco: ")
    assert sweep_help("limit").startswith("grounding: ") and "; zeroshot: " in sweep_help("limit")


def test_a_bad_value_is_one_line_naming_what_is_allowed():
    negatives, grounding = get_task("negatives"), get_task("grounding")
    with pytest.raises(InputError, match=r"^unknown --region 'box'; the choices are roi, crop$"):
        negatives.check({"region": "box"})
    with pytest.raises(InputError, match=r"\(0, 2\]"):
        grounding.check({"box_alpha": 3})
    with pytest.raises(InputError, match="--limit must be at least 1"):
        grounding.check({"limit": 0})
    with pytest.raises(InputError, match="unknown evaluation option 'colour'"):
        grounding.check({"colour": "red"})
    assert grounding.check({"limit": "4", "kinds": "generic gradcam", "proposals": None}) == {
        "limit": 4, "kinds": ["generic", "gradcam"]}


def test_a_child_reads_the_declared_defaults():
    values = get_task("negatives").values({"splits": ["hard"]})
    assert (values["region"], values["ties"], values["splits"], values["limit"]) == ("roi", "hit", ["hard"], None)
    assert get_task("retrieval").values({})["queries"] is True


def test_a_sweep_is_refused_before_anything_is_recorded(isolated_home):
    from explorer.jobs import JobError, JobManager

    jobs = JobManager(gpu_ids=[], max_running=1, subreaper=False)
    with pytest.raises(JobError, match=r"\(0, 2\]"):
        jobs.submit_eval(["m"], ["/tmp"], task="refcoco", options={"box_alpha": 3}, start=False)
    with pytest.raises(JobError, match="the choices are raw, sent"):
        jobs.submit_eval(["m"], ["/tmp"], task="grounding", options={"text": "tokens"}, start=False)
    assert jobs.list() == []


def test_the_command_line_checks_a_choice_by_the_declaration(tmp_path):
    """Not argparse's usage error: ``explorer.cli.main`` prints the InputError as its one ``error:`` line."""
    from explorer.cli.task_options import task_values
    from explorer.evaluation.tasks.zeroshot import OPTIONS

    args = subparser("eval-zeroshot").parse_args(["--data", str(tmp_path), "--model", "x", "--out", "o.json",
                                                  "--class-set", "all"])
    with pytest.raises(InputError, match=r"^unknown --class-set 'all'; the choices are fixed, present$"):
        task_values(args, OPTIONS)


def test_an_option_declares_a_known_kind():
    with pytest.raises(ValueError, match="kind"):
        Option("x", "help", kind="colour")
    assert all(option.kind != "colour" for task in TASKS.values() for option in task.options)


def test_the_refer_options_declared_are_what_its_reader_takes():
    from explorer.data.grounding_sets import layout_options
    from explorer.evaluation.tasks.grounding import REFER

    assert layout_options("refcoco") == tuple(option.name for option in REFER)
    assert layout_options("dci") == ()
