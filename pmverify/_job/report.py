"""The fuzzing job's outputs: the JSON report, rewritten whole as a checkpoint (so that a job killed
at any moment leaves a valid one), and a JUnit XML file for CI dashboards; either, given as a
stream (``-``, ``/dev/stdout``), is written once at the end instead."""

from __future__ import annotations

import json
import pathlib
import re
import xml.etree.ElementTree as ET
from typing import TextIO

from .._io import output_stream, write_atomic, write_output
from ..targets import jsonable

__all__ = ["jsonable", "junit_xml", "write_atomic", "write_json", "write_outputs", "xml_text"]


def write_json(path: pathlib.Path, report: dict) -> None:
    """``report`` as JSON, written atomically (:func:`pmverify._io.write_atomic`)."""
    write_atomic(path, json.dumps(jsonable(report), indent=2) + "\n")


def write_outputs(
    report: dict,
    json_path: pathlib.Path | None,
    junit_path: pathlib.Path | None,
    *,
    streams: bool,
    stdout: TextIO | None = None,
) -> None:
    """Write ``report`` as JSON to ``json_path`` and as JUnit XML to ``junit_path`` (None: not
    asked for): with ``streams=False`` those that are files (the job's checkpoints, atomic), with
    ``streams=True`` those that are streams (``-``, ``/dev/stdout``...: once, at the end; ``-`` to
    ``stdout``). See :func:`pmverify._io.write_output`."""
    for path, render in (
        (json_path, lambda: json.dumps(jsonable(report), indent=2) + "\n"),
        (junit_path, lambda: junit_xml(jsonable(report))),
    ):
        if path is not None and (output_stream(path) is not None) == streams:
            write_output(path, render(), stdout=stdout)


_NOT_XML = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def xml_text(text: str) -> str:
    """``text`` without what XML 1.0 cannot hold (terminal colour codes, control characters)."""
    return _NOT_XML.sub("", text)


def _finding_text(finding: dict) -> str:
    lines = [f"{v['oracle']}: {v['message']}" for v in finding["violations"]]
    if finding.get("stack"):
        lines.append("where it hung (innermost frame first):")
        lines += [f"  {frame}" for frame in finding["stack"].splitlines()]
    lines.append(f"case: {finding.get('case') or 'unknown'}")
    lines.append(f"reproducer: {finding.get('reproducer') or 'not written'}")
    for other in finding.get("other_failures") or ():
        label = f"{other['oracle']} ({other['oracle_kind']})" if other.get("oracle_kind") else other["oracle"]
        how = "shrunk" if other.get("shrunk") else "its first failing case, not shrunk"
        lines.append(f"also broken during the search, {label} ({how}): {other['case']}")
        lines += [f"  {v['oracle']}: {v['message']}" for v in other["violations"]]
        lines.append(f"  reproducer: {other.get('reproducer') or 'not written'}")
    return xml_text("\n".join(lines))


def _failure(case: ET.Element, finding: dict) -> None:
    oracles = ", ".join(dict.fromkeys(v["oracle"] for v in finding["violations"]))
    element = ET.SubElement(case, "failure", message=xml_text(f"{finding['kind']}: {oracles}"), type=finding["kind"])
    element.text = _finding_text(finding)


def junit_xml(report: dict) -> str:
    """JUnit XML of ``report``: a ``testsuite`` per target, a ``testcase`` per case family (a
    ``failure`` per finding, an ``error`` for a search that could not run, ``skipped`` for a family
    that checked no case: ``interrupted``, or the budget ended), a ``whole run``
    testcase for a finding of the whole run (``never_matched``), a testcase per real-model
    check, and a target's warnings (:class:`~pmverify.UnfusedWarning` texts) as its suite's
    ``system-out``."""
    suites = ET.Element("testsuites", name="pmverify fuzz")
    for target in report["targets"]:
        suite = ET.SubElement(suites, "testsuite", name=target["name"])
        props = ET.SubElement(suite, "properties")
        for key in ("seed", "profile", "budget_s", "database"):
            ET.SubElement(props, "property", name=key, value=str(report.get(key)))
        failures = errors = 0
        for family, counts in target["families"].items():
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"pmverify.fuzz.{target['name']}",
                name=family,
                time=f"{counts.get('seconds', 0.0):.3f}",
            )
            ET.SubElement(case, "system-out").text = f"{counts.get('cases', 0)} cases"
            if family in target.get("unrun_families", ()):  # checked nothing: not a pass
                interrupted = target.get("status") == "interrupted"
                ET.SubElement(case, "skipped", message="interrupted" if interrupted else "not run: the budget ended")
            for finding in (f for f in target["findings"] if f["family"] == family):
                failures += 1
                _failure(case, finding)
            for error in (e for e in target["errors"] if e.get("family") == family):
                errors += 1
                text = xml_text(error["message"])
                ET.SubElement(case, "error", message=text.splitlines()[0] if text else "").text = text
        for finding in (f for f in target["findings"] if f["family"] is None):
            failures += 1
            name = "whole run"
            _failure(ET.SubElement(suite, "testcase", classname=f"pmverify.fuzz.{target['name']}", name=name), finding)
        for error in (e for e in target["errors"] if e.get("family") is None):
            errors += 1
            case = ET.SubElement(suite, "testcase", classname=f"pmverify.fuzz.{target['name']}", name="worker")
            text = xml_text(error["message"])
            ET.SubElement(case, "error", message=text.splitlines()[0] if text else "").text = text
        if target.get("internal_errors"):  # pmverify's own errors: not failures of the pass, shown
            err = ET.SubElement(suite, "system-err")
            err.text = xml_text(
                f"{target['internal_errors']} pmverify internal error(s), not findings of the pass; "
                f"first:\n{target.get('first_internal_error') or ''}"
            )
        if target.get("warnings"):  # groups of planted instances never rewritten: not failures, shown
            out = ET.SubElement(suite, "system-out")
            out.text = xml_text("\n".join(f"WARNING: {text}" for text in target["warnings"]))
        suite.set("tests", str(len(suite.findall("testcase"))))
        suite.set("skipped", str(len(suite.findall("testcase/skipped"))))
        suite.set("failures", str(failures))
        suite.set("errors", str(errors))
        suite.set("time", f"{target.get('elapsed_s', 0.0):.3f}")
    if report.get("real_models"):
        suite = ET.SubElement(suites, "testsuite", name="real_models")
        for model in report["real_models"]:
            case = ET.SubElement(
                suite,
                "testcase",
                classname="pmverify.fuzz.real_models",
                name=f"{model.get('target', '')}:{model['name']}",
                time=f"{model.get('elapsed_s') or 0.0:.3f}",
            )
            if model.get("skipped"):
                ET.SubElement(case, "skipped", message=model["skipped"])
            elif not model["ok"]:
                failure = ET.SubElement(case, "failure", message="real model check failed")
                failure.text = xml_text(json.dumps(jsonable(model)))
        suite.set("tests", str(len(suite.findall("testcase"))))
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"
