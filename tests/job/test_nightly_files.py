"""tox.ini's nightly environment and the example workflow run a command pmverify accepts, and the
workflow uploads what that command writes."""

import configparser
import pathlib
import re
import shlex

import yaml

from pmverify.cli import _parser

ROOT = pathlib.Path(__file__).parents[2]


def _nightly_command() -> list[str]:
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    command = tox["testenv:nightly"]["commands"].replace("\\\n", " ")
    # tox substitutions: {env:NAME:default} -> default, {toxinidir} -> ., {posargs} -> nothing
    while "{env:" in command:
        command = re.sub(r"\{env:[A-Z_]+:([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}", r"\1", command)
    command = command.replace("{toxinidir}", ".").replace("{posargs}", "")
    return shlex.split(command)


def test_tox_nightly_runs_the_job_with_every_output():
    argv = _nightly_command()
    assert argv[:2] == ["pmverify", "fuzz"]
    args = _parser().parse_args(argv[1:])
    assert args.profile == "nightly" and args.budget == 8 * 3600
    assert args.db == "./.pmverify/examples"
    assert str(args.report).startswith(".pmverify/nightly") and str(args.junit).startswith(".pmverify/nightly")
    assert str(args.repro_dir).startswith(".pmverify/nightly")


def test_workflow_is_scheduled_and_uploads_database_and_reproducers():
    workflow = yaml.safe_load((ROOT / ".github/workflows/nightly.yml").read_text())
    assert workflow[True]["schedule"]  # YAML 1.1 reads the key `on` as True
    steps = workflow["jobs"]["fuzz"]["steps"]
    assert any("tox -e nightly" in step.get("run", "") for step in steps)
    upload = next(step for step in steps if step.get("uses", "").startswith("actions/upload-artifact"))
    paths = upload["with"]["path"].split()
    assert upload["if"] == "always()"  # a night with findings fails the job: upload them all the same
    assert ".pmverify/examples" in paths and ".pmverify/nightly" in paths
    cache = next(step for step in steps if step.get("uses", "").startswith("actions/cache"))
    assert cache["with"]["path"] == ".pmverify/examples"
