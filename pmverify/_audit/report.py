"""The audit's outputs: the summary table (stdout), the JSON report, JUnit XML (a testsuite per
module, a testcase per rewrite) and the Markdown table of ``docs/AUDIT.md``, all from the report."""

from __future__ import annotations

import collections
import json
import os
import pathlib
import xml.etree.ElementTree as ET
from typing import Any, TextIO

from .._io import output_stream, write_output
from .._job.report import jsonable, xml_text
from .._registry.entries import KINDS
from .check import FINDING, LABELS, NOT_COVERED, describe_counts, label

__all__ = ["summary", "junit_xml", "markdown", "write_outputs"]


def _kind(row: dict[str, Any]) -> str:
    return row.get("kind") or "replacement"


def _grouped(report: dict[str, Any], key: Any) -> tuple[dict[Any, collections.Counter[str]], dict[Any, int]]:
    """Per group (``key(row)``, in order of first row): the statuses' counts and the cases checked."""
    counts: dict[Any, collections.Counter[str]] = {}
    cases: collections.Counter[Any] = collections.Counter()
    for row in report["rewrites"]:
        group = key(row)
        counts.setdefault(group, collections.Counter())[label(row)] += 1
        cases[group] += (row.get("cases") or {}).get("checked", 0)
    return counts, cases


def _statuses(report: dict[str, Any]) -> list[str]:
    """The labels that get a column (statuses, a never-matched finding apart: :func:`.check.label`):
    those that occur, ``ok`` and ``finding`` always."""
    total = collections.Counter(label(row) for row in report["rewrites"])
    return [s for s in LABELS if s in ("ok", FINDING) or total[s]]


def _table_rows(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The header and rows (a row per kind and module, kind by kind, then ``total``) of the counts
    per label (:func:`_statuses`) and the cases checked."""
    counts, cases = _grouped(report, lambda row: (_kind(row), row["module"]))
    order = sorted(counts, key=lambda group: KINDS.index(group[0]) if group[0] in KINDS else len(KINDS))
    statuses = _statuses(report)
    total = sum(counts.values(), collections.Counter())
    header = ["kind", "module", "entries", *statuses, "cases"]
    rows = [
        [kind, module, str(sum(counts[kind, module].values())), *(str(counts[kind, module][s]) for s in statuses)]
        + [str(cases[kind, module])]
        for kind, module in order
    ]
    rows.append(["total", "", str(sum(total.values())), *(str(total[s]) for s in statuses), str(sum(cases.values()))])
    return header, rows


def _pass_rows(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The header and rows (a row per pass, in order of first entry) of the per-status counts and
    the cases checked."""
    counts, cases = _grouped(report, lambda row: row.get("pass") or "?")
    statuses = _statuses(report)
    header = ["pass", "entries", *statuses, "cases"]
    rows = [
        [name, str(sum(c.values())), *(str(c[s]) for s in statuses), str(cases[name])] for name, c in counts.items()
    ]
    return header, rows


def _print_table(header: list[str], rows: list[list[str]], out: TextIO, text: int = 1) -> None:
    """``header`` and ``rows`` aligned, the first ``text`` columns to the left, the rest to the right."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(
            f"{c:<{w}}" if i < text else f"{c:>{w}}" for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    first = line(header)
    print(first, file=out)
    print("-" * len(first), file=out)
    for row in rows:
        print(line(row).rstrip(), file=out)


def _count_cells(row: dict[str, Any]) -> list[str]:
    """``cases`` (checked), ``rewritten``, ``void``, ``rejected`` of a rewrite's row, ``-`` where not known."""
    counts = row.get("cases")
    if counts is None:
        return ["-"] * 4
    return [str(counts.get(key, 0)) for key in ("checked", "rewritten", "void", "rejected")]


def summary(report: dict[str, Any], out: TextIO) -> None:
    """The table of statuses and cases checked per kind and module, then per pass, then a line per
    finding and per error (with its cases)."""
    print(f"\nsummary ({report['status']}, {report['elapsed_s']:.0f}s)", file=out)
    _print_table(*_table_rows(report), out, text=2)
    print("", file=out)
    _print_table(*_pass_rows(report), out)
    for row in report["rewrites"]:
        if row["status"] in (FINDING, NOT_COVERED, "error"):
            where = f"\n    reproducer: {row['reproducer']}" if row.get("reproducer") else ""
            print(
                f"  {label(row).upper()} {row['module']}/{row['name']} ({describe_counts(row.get('cases'))}): "
                f"{row['reason']}{where}",
                file=out,
            )


def junit_xml(report: dict[str, Any]) -> str:
    """JUnit XML: a ``testsuite`` per module, a ``testcase`` per rewrite: a ``failure`` for a
    finding, an ``error`` for an error of pmverify, ``skipped`` (with the status and reason) for
    one that was not compared (unsatisfiable here, not comparable, not registered, not run)."""
    suites = ET.Element("testsuites", name="pmverify audit")
    rows_by_module: dict[str, list[dict[str, Any]]] = {}
    for row in report["rewrites"]:
        rows_by_module.setdefault(row["module"], []).append(row)
    for module, rows in rows_by_module.items():
        suite = ET.SubElement(suites, "testsuite", name=module)
        props = ET.SubElement(suite, "properties")
        for key in ("torch", "pmverify", "seed", "max_examples", "device"):
            ET.SubElement(props, "property", name=key, value=str(report.get(key)))
        failures = errors = skipped = 0
        seconds = 0.0
        for row in rows:
            seconds += row.get("seconds") or 0.0
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"pmverify.audit.{module}",
                name=row["name"],
                time=f"{row.get('seconds') or 0.0:.3f}",
            )
            reason = xml_text(row.get("reason") or "")
            if row["status"] == FINDING:
                failures += 1
                element = ET.SubElement(case, "failure", message=reason, type=row.get("finding_kind") or FINDING)
                lines = [f"{v['oracle']}: {v['message']}" for v in row["violations"]]
                lines.append(f"reproducer: {row.get('reproducer') or 'not written'}")
                lines.append(f"cases: {describe_counts(row.get('cases'))}")
                element.text = xml_text("\n".join(lines))
            elif row["status"] == "error":
                errors += 1
                element = ET.SubElement(case, "error", message=reason)
                element.text = xml_text(row.get("error") or reason)
            elif row["status"] != "ok":
                skipped += 1
                ET.SubElement(case, "skipped", message=f"{row['status']}: {reason}")
            else:
                ET.SubElement(case, "system-out").text = f"{reason} ({describe_counts(row.get('cases'))})"
        suite.set("tests", str(len(rows)))
        suite.set("failures", str(failures))
        suite.set("errors", str(errors))
        suite.set("skipped", str(skipped))
        suite.set("time", f"{seconds:.3f}")
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def _flavour(row: dict[str, Any]) -> str:
    """A rewrite's trace function (``fwd_only``), or the kind of a handler's entry (``graph``)."""
    return row.get("trace_fn") or _kind(row)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _title(sources: list[str]) -> str:
    named = [f"`{source}`" for source in sources if source != "inductor"]
    if "inductor" in sources:
        named.insert(0, "Inductor's own pattern passes")
    return f"# Audit of the pattern entries of {' and '.join(named) or 'Inductor'}"


def _link(path: str, markdown_path: Any) -> str:
    """``path`` (a reproducer) as a link from the Markdown file ``markdown_path``'s folder."""
    if markdown_path is None or output_stream(markdown_path) is not None:
        return path
    folder = pathlib.Path(markdown_path).resolve().parent
    return os.path.relpath(pathlib.Path(path).resolve(), folder)


def markdown(report: dict[str, Any], path: Any = None) -> str:
    """``docs/AUDIT.md``: the versions and date, the per-module counts of statuses and cases, a
    line per rewrite that is not ``ok`` (findings first), with its cases, its reason and a link to
    its reproducer (relative to ``path``, the file it is written to), and a table of every
    rewrite's cases; regenerated by the command it names."""
    header, rows = _table_rows(report)
    pass_header, pass_rows = _pass_rows(report)
    lines = [
        _title(report.get("sources") or ["inductor"]),
        "",
        f"pmverify {report['pmverify']} on torch {report['torch']}, {report['date']}: seed {report['seed']}, "
        f"on {report.get('device') or 'cpu'}, "
        f"{report['max_examples']} cases per rewrite for check_rewrite and {report['planted_examples']} planted "
        f"among random graphs with near misses, as many per graph entry for check_entry (kinds: "
        f"{', '.join(report.get('kinds') or ['replacement'])}); {report['elapsed_s']:.0f}s with {report['jobs']} job(s) "
        f"({report['status']}).",
        "",
        f"Regenerate with `{report['command']}`.",
        "",
        "`cases`: the cases a rewrite's checks ran (shrinking's included), summed; per rewrite, in the last "
        "table, also those the rewrite fired in (`rewritten`), those semantics could say nothing of (`void`: a "
        "NaN/Inf float64 reference, or not comparable) and the instances its `extra_check` refused (`rejected`).",
        "",
        "`dead pattern (never matches)`: findings of a rewrite that never fired on inputs drawn like its example "
        "inputs, with no gate found (dead code, not a wrong result: nothing was compared), counted apart from the "
        "findings. `not covered`: nothing broke, but a near-miss kind that applies was never judged (its row says "
        "which); an `ok` row judged every near-miss kind that applies to it.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---", "---"] + ["---:"] * (len(header) - 2)) + "|",
        *("| " + " | ".join(row) + " |" for row in rows),
        "",
        "Per pass:",
        "",
        "| " + " | ".join(pass_header) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(pass_header) - 1)) + "|",
        *("| " + " | ".join(_cell(c) for c in row) + " |" for row in pass_rows),
    ]
    order = [FINDING, *(s for s in LABELS if s not in ("ok", FINDING))]
    for status in order:
        chosen = [row for row in report["rewrites"] if label(row) == status]
        if not chosen:
            continue
        lines += ["", f"## {status[0].upper()}{status[1:]} ({len(chosen)})", ""]
        for row in chosen:
            repro = f" ([reproducer]({_link(row['reproducer'], path)}))" if row.get("reproducer") else ""
            lines.append(
                f"- `{row['module']}/{row['name']}` ({_flavour(row)}; {describe_counts(row.get('cases'))}): "
                f"{_cell(row.get('reason') or '')}{repro}"
            )
    lines += [
        "",
        "## Cases per entry",
        "",
        "| entry | kind or trace | status | cases | rewritten | void | rejected | seconds |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in report["rewrites"]:
        seconds = "-" if row.get("seconds") is None else f"{row['seconds']:.1f}"
        cells = [f"`{row['module']}/{_cell(row['name'])}`", _flavour(row), row["status"], *_count_cells(row), seconds]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_outputs(report: dict[str, Any], options: Any, *, streams: bool, stdout: TextIO | None = None) -> None:
    """Write ``report`` to ``options.report`` (JSON), ``.junit`` and ``.markdown`` where given: with
    ``streams=False`` those that are files (atomically, as checkpoints), with ``streams=True``
    those that are streams (``-``, ``/dev/stdout``: once, at the end). The Markdown table is
    written only once the audit is over (it would say "running" before)."""
    renders = (
        (options.report, lambda: json.dumps(jsonable(report), indent=2) + "\n"),
        (options.junit, lambda: junit_xml(report)),
        (options.markdown if report["status"] != "running" else None, lambda: markdown(report, options.markdown)),
    )
    for path, render in renders:
        if path is not None and (output_stream(path) is not None) == streams:
            write_output(path, render(), stdout=stdout)
