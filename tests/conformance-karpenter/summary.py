#!/usr/bin/env python3
"""Passed/failed/skipped per area of Karpenter's e2e suites, one column group per controller.

    summary.py OUT CONTROLLER...                 print the table (and write OUT/summary.md, OUT/junit.xml)
    summary.py --check OUT CONTROLLER...         exit 1 if a partition of the first controller left no
                                                 readable JUnit report or failed outside its specs (a
                                                 BeforeSuite, say), or if the first controller does not
                                                 pass a spec the others pass
    summary.py --focus SPECS                     print the Ginkgo focus regex that selects exactly the
                                                 specs the file SPECS lists
    summary.py --expect SPECS OUT CONTROLLER...  exit 1 unless each controller ran exactly the specs
                                                 SPECS lists (at least one) and passed every one, each
                                                 of its partitions leaving the JUnit report of a suite
                                                 that succeeded

Reads the JUnit reports the partitions wrote, one per suite a partition ran (OUT/<controller>-<n>/
junit-<suite>.xml, and the suite's exit status in OUT/<controller>-<n>/exit-<suite>). A spec is named by
its suite's description and its full text ("Regression Integration CRD Hash should have NodePool hash"),
its area by the first two words. A spec counts in the areas it was run for: specs a partition's focus
left out are not counted.

SPECS has one spec a line, so named (the JUnit name without the leading "[It] ", after the suite's
description); blank lines and lines starting with # are ignored.
"""

import glob
import os
import sys
import xml.etree.ElementTree as ET

# The areas: each suite's description (Ginkgo matches a focus against it and the spec's text, joined by a
# space) and one of its top-level containers.
AREAS = ["Regression Integration", "Regression NodeClaim", "Regression StaticCapacity", "Regression Chaos",
         "Regression Performance", "Regression CapacityBuffer", "Regression DefaultTopologySpreadConstraints",
         "Disruption Drift", "Disruption Expiration", "Disruption Termination", "Disruption Reboot",
         "Disruption Repair", "Disruption TerminateFirst", "DRA DRA"]


class Partition:
    """One partition's JUnit report: the specs it ran and what went wrong outside them."""

    def __init__(self, directory):
        self.name = os.path.basename(directory)
        # spec name -> (passed | failed | skipped | not run, message)
        self.specs = {}
        # What makes the report untrustworthy or the run failed outside the specs.
        self.problems = []
        # Problems that only say the suite as a whole did not succeed (a failed spec does that too).
        self.outcome = []
        exits = sorted(glob.glob(os.path.join(directory, "exit-*")))
        if not exits:
            self.problems.append(f"{self.name}: no suite ran (see the logs in {directory})")
        for exit_file in exits:
            self._suite(directory, os.path.basename(exit_file)[len("exit-"):], exit_file)

    def _suite(self, directory, suite, exit_file):
        path = os.path.join(directory, f"junit-{suite}.xml")
        try:
            root = ET.parse(path).getroot()
        except FileNotFoundError:
            self.problems.append(f"{self.name}: no JUnit report at {path}: the {suite} suite did not run to its "
                                 f"end (see {os.path.join(directory, suite + '.log')})")
            return
        except ET.ParseError as err:
            self.problems.append(f"{self.name}: the JUnit report {path} cannot be read: {err}")
            return
        suites = list(root.iter("testsuite"))
        if not suites:
            self.problems.append(f"{self.name}: the JUnit report {path} has no test suite")
        for report in suites:
            properties = {p.get("name"): p.get("value", "") for p in report.iter("property")}
            if properties.get("SuiteSucceeded") == "false":
                reason = properties.get("SpecialSuiteFailureReason", "")
                self.outcome.append(f"{self.name}: the {suite} suite did not succeed" +
                                    (f" ({reason})" if reason else ""))
            for case in report.iter("testcase"):
                self._case(report.get("name", ""), case)
        with open(exit_file) as f:
            code = f.read().strip()
        if code != "0":
            self.outcome.append(f"{self.name}: the {suite} suite exited with status {code}")

    def _case(self, description, case):
        name = case.get("name", "")
        status = case.get("status", "")
        detail = case.find("failure")
        if detail is None:
            detail = case.find("error")
        message = (detail.get("message", "") if detail is not None else "").strip()
        if not name.startswith("[It] "):
            # BeforeSuite, AfterSuite and the like: when one fails, the specs did not run (or ran
            # on a harness that broke).
            if status not in ("passed", "skipped", ""):
                first = message.splitlines()[0] if message else ""
                self.problems.append(f"{self.name}: {name} {status}" + (f": {first}" if first else ""))
            return
        name = f"{description} {name[len('[It] '):]}"
        skipped = case.find("skipped")
        if status == "passed":
            self.specs[name] = ("passed", "")
        elif status == "skipped" or skipped is not None:
            reason = skipped.get("message", "") if skipped is not None else ""
            # Left out by the partition's focus ("skipped"; a spec that skips itself says why).
            if "filter" in reason or reason.strip() in ("", "skipped"):
                return
            self.specs[name] = ("skipped", reason)
        elif status in ("pending", "interrupted"):
            self.specs[name] = ("not run", status)  # not run to the end (a run stopped by Ctrl-C)
        else:  # failed, timedout, panicked, aborted
            self.specs[name] = ("failed", f"{status}: {message}" if message else status)


def partitions(out, controller):
    return [Partition(d) for d in sorted(glob.glob(os.path.join(out, f"{controller}-*"))) if os.path.isdir(d)]


def merged(parts):
    """{spec name: (status, message)} over partitions; a spec that failed anywhere failed."""
    specs = {}
    for part in parts:
        for name, (status, message) in part.specs.items():
            if specs.get(name, ("",))[0] != "failed":
                specs[name] = (status, message)
    return specs


def results(out, controller):
    """{spec name: passed | failed | skipped} over the controller's partitions (specs not run to the end
    are not counted)."""
    return {n: s for n, (s, _) in merged(partitions(out, controller)).items() if s != "not run"}


def area(name):
    first = " ".join(name.split(" ", 2)[:2])
    return first if first in AREAS else None


def table(out, controllers):
    by = {c: results(out, c) for c in controllers}
    header = "| Area | " + " | ".join(f"{c}: passed / failed / skipped" for c in controllers) + " |"
    lines = [header, "|---" * (len(controllers) + 1) + "|"]
    totals = {c: [0, 0, 0] for c in controllers}
    for a in AREAS:
        cells = []
        for c in controllers:
            counts = [0, 0, 0]
            for name, status in by[c].items():
                if area(name) == a:
                    counts[["passed", "failed", "skipped"].index(status)] += 1
            totals[c] = [t + n for t, n in zip(totals[c], counts)]
            cells.append(" / ".join(map(str, counts)) if sum(counts) else "-")
        lines.append(f"| {a} | " + " | ".join(cells) + " |")
    lines.append("| **Total** | " + " | ".join(" / ".join(map(str, totals[c])) for c in controllers) + " |")
    notes = []
    for c in controllers:
        problems = [p for part in partitions(out, c) for p in part.problems]
        bad = sorted(n for n, s in by[c].items() if s != "passed")
        if problems or bad:
            notes.append(f"\n{c}, not passed:")
            notes += [f"  {p}" for p in problems]
            notes += [f"  {by[c][n]}: {n}" for n in bad]
    return by, "\n".join(lines) + "\n" + "\n".join(notes) + "\n"


def merge_junit(out, controllers):
    suites = ET.Element("testsuites")
    for c in controllers:
        for path in sorted(glob.glob(os.path.join(out, f"{c}-*", "junit-*.xml"))):
            try:
                root = ET.parse(path).getroot()
            except ET.ParseError:
                continue  # the table names it
            for suite in root.iter("testsuite"):
                suite.set("name", f"{c}/{os.path.basename(os.path.dirname(path))}: {suite.get('name', '')}")
                suites.append(suite)
    ET.ElementTree(suites).write(os.path.join(out, "junit.xml"), encoding="utf-8", xml_declaration=True)


def read_specs(path):
    """The spec names the file lists, in order; exits on a duplicate or an empty list."""
    specs = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line in specs:
                sys.exit(f"{path}: {line!r} is listed twice")
            specs.append(line)
    if not specs:
        sys.exit(f"{path} lists no spec")
    return specs


def quote_meta(text):
    """Go's regexp.QuoteMeta: Ginkgo's focus is a Go regular expression."""
    return "".join("\\" + c if c in "\\.+*?()|[]{}^$" else c for c in text)


def focus(specs):
    """The focus regex that selects exactly these specs (and no spec whose text only starts with one)."""
    return "^(" + "|".join(quote_meta(s) for s in specs) + ")$"


def expect(specs, out, controller):
    """What is wrong with the controller's run against the expected specs (nothing: an empty list)."""
    parts = partitions(out, controller)
    if not parts:
        return [f"no partition of {controller} in {out}: the suite did not run"]
    wrong = [p for part in parts for p in part.problems + part.outcome]
    ran = merged(parts)
    for name in specs:
        status, message = ran.get(name, ("did not run", ""))
        if status != "passed":
            wrong.append(f"{status}: {name}" + (f" ({message.splitlines()[0]})" if message else ""))
    wrong += [f"ran but not expected: {name}" for name in sorted(set(ran) - set(specs))]
    return wrong


def main(argv):
    mode = argv[0] if argv and argv[0].startswith("--") else None
    if mode:
        argv = argv[1:]
    if mode == "--focus":
        if len(argv) != 1:
            sys.exit(__doc__)
        print(focus(read_specs(argv[0])))
        return
    if mode == "--expect":
        if len(argv) < 3:
            sys.exit(__doc__)
        specs, out, controllers = read_specs(argv[0]), argv[1], argv[2:]
        failed = False
        for c in controllers:
            wrong = expect(specs, out, c)
            if wrong:
                failed = True
                passed = sum(1 for n in specs if results(out, c).get(n) == "passed")
                print(f"{c} did not run exactly the {len(specs)} expected specs of {argv[0]} and pass them all "
                      f"({passed} passed):")
                for w in wrong:
                    print(f"  {w}")
            else:
                print(f"{c}: all {len(specs)} expected specs ran and passed, and no other")
        if failed:
            sys.exit(1)
        return
    if mode not in (None, "--check") or len(argv) < 2:
        sys.exit(__doc__)
    out, controllers = argv[0], argv[1:]
    by, text = table(out, controllers)
    if mode == "--check":
        first, others = controllers[0], controllers[1:]
        parts = partitions(out, first)
        problems = [p for part in parts for p in part.problems]
        if not parts:
            problems.append(f"no partition of {first} in {out}: the suite did not run")
        # A spec the control passes counts whether the first controller failed it or never ran it.
        worse = sorted(
            n for n in set(by[first]) | {n for o in others for n in by[o]}
            if by[first].get(n) != "passed" and (not others or any(by[o].get(n) == "passed" for o in others))
        )
        if problems:
            print(f"{first}'s run is not complete:")
            for p in problems:
                print(f"  {p}")
        if worse:
            print(f"{first} does not pass {len(worse)} spec(s)" + (" the control passes:" if others else ":"))
            for n in worse:
                print(f"  {by[first].get(n, 'not run')}: {n}")
        if problems or worse:
            sys.exit(1)
        return
    print(text)
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(text)
    merge_junit(out, controllers)
    print(f"JUnit: {os.path.join(out, 'junit.xml')} (and one per partition)")


if __name__ == "__main__":
    main(sys.argv[1:])
