#!/usr/bin/env python3
"""The checks of summary.py fail when the suite did not run what it should: run with
`python3 -m unittest summary_test` in this directory (`make unit` does).

The reports are shaped as Ginkgo v2 writes them (--ginkgo.junit-report), one per suite a partition
runs: one testsuite named by the suite's description with its properties, a testcase per suite node
and per spec, specs the focus left out "skipped".
"""

import contextlib
import io
import os
import re
import tempfile
import unittest
import xml.etree.ElementTree as ET

import summary

HERE = os.path.dirname(os.path.abspath(__file__))
SPECS = summary.read_specs(os.path.join(HERE, "fast-specs.txt"))
# Specs of the suite the fast focus leaves out, two of them close to listed ones.
OTHERS = [
    "Regression Integration DaemonSet should account for LimitRange DefaultRequest on daemonSet pods for resources",
    "Regression NodeClaim StandaloneNodeClaim should create a standard NodeClaim based on resource requests",
    "Disruption Drift should disrupt nodes that have drifted due to requirements",
]
# The suites (by package) and their descriptions, as run.sh names them.
SUITES = {"regression": "Regression", "disruption": "Disruption", "dra": "DRA"}


def suite_of(name):
    """The suite of a spec named with its description, and the name Ginkgo's report gives it."""
    for suite, description in SUITES.items():
        if name.startswith(description + " "):
            return suite, name[len(description) + 1:]
    raise ValueError(name)


def report(cases, succeeded=True, reason="", suite="regression"):
    """A Ginkgo JUnit report of one suite: cases are (name, status, message), spec names without the
    suite's description."""
    description = SUITES[suite]
    suites = ET.Element("testsuites")
    element = ET.SubElement(suites, "testsuite", name=description)
    properties = ET.SubElement(element, "properties")
    for name, value in [("SuiteSucceeded", str(succeeded).lower()), ("SpecialSuiteFailureReason", reason)]:
        ET.SubElement(properties, "property", name=name, value=value)
    for name, status, message in cases:
        case = ET.SubElement(element, "testcase", name=name, classname=description, status=status)
        if status == "skipped":
            ET.SubElement(case, "skipped", message=message or "skipped")
        elif status in ("failed", "timedout"):
            ET.SubElement(case, "failure", message=message, type=status)
        elif status in ("panicked", "interrupted"):
            ET.SubElement(case, "error", message=message, type=status)
    return ET.tostring(suites, encoding="unicode")


def good_run(skip=(), fail=(), extra=(), tail=()):
    """The reports of a run of the fast focus, one per suite (suite -> (report, exit status)): the
    listed specs passed (but `skip` left out by the focus and `fail` failed), the others left out,
    `extra` passed too; `tail` cases end the regression suite's report, which then failed."""
    cases = {suite: [("[BeforeSuite]", "passed", "")] for suite in SUITES}
    failed = set()
    for name in SPECS + OTHERS:
        suite, short = suite_of(name)
        if name in skip or (name in OTHERS and name not in extra):
            cases[suite].append((f"[It] {short}", "skipped", "skipped"))
        elif name in fail:
            cases[suite].append((f"[It] {short}", "failed", "Expected success, got an error\nmore"))
            failed.add(suite)
        else:
            cases[suite].append((f"[It] {short}", "passed", ""))
    for suite in SUITES:
        cases[suite].append(("[AfterSuite]", "passed", ""))
    if tail:
        cases["regression"] += list(tail)
        failed.add("regression")
    return {suite: (report(c, succeeded=suite not in failed, reason="Suite Timeout Elapsed" if tail else "", suite=suite),
                    1 if suite in failed else 0, ) for suite, c in cases.items()}


class Run:
    """An OUT directory with partitions."""

    def __init__(self, test):
        tmp = tempfile.TemporaryDirectory()
        test.addCleanup(tmp.cleanup)
        self.out = tmp.name

    def partition(self, name, junit=None, exit_code=0):
        """A partition that ran the regression suite (junit: its report, None: no report), or the
        suites of a dict suite -> (report, exit status)."""
        d = os.path.join(self.out, name)
        os.makedirs(d)
        runs = junit if isinstance(junit, dict) else {"regression": (junit, exit_code)}
        for suite, (text, code) in runs.items():
            if text is not None:
                with open(os.path.join(d, f"junit-{suite}.xml"), "w") as f:
                    f.write(text)
            with open(os.path.join(d, f"exit-{suite}"), "w") as f:
                f.write(f"{code}\n")
        return self

    def main(self, *args):
        """summary.main's exit status (0 when it returned) and what it printed."""
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            try:
                summary.main(list(args))
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
        return code, printed.getvalue()

    def expect(self, *controllers):
        return self.main("--expect", os.path.join(HERE, "fast-specs.txt"), self.out, *(controllers or ["capstan"]))


class Expect(unittest.TestCase):
    def test_the_listed_specs_all_passed(self):
        run = Run(self).partition("capstan-0", good_run())
        code, printed = run.expect()
        self.assertEqual(code, 0, printed)
        self.assertIn(f"all {len(SPECS)} expected specs ran and passed", printed)

    def test_no_junit_report(self):
        code, printed = Run(self).partition("capstan-0", None, exit_code=1).expect()
        self.assertEqual(code, 1)
        self.assertIn("no JUnit report", printed)
        self.assertIn(f"did not run: {SPECS[0]}", printed)

    def test_an_empty_junit_report(self):
        code, printed = Run(self).partition("capstan-0", "").expect()
        self.assertEqual(code, 1)
        self.assertIn("cannot be read", printed)

    def test_no_partition_at_all(self):
        code, printed = Run(self).expect()
        self.assertEqual(code, 1)
        self.assertIn("the suite did not run", printed)

    def test_a_failed_before_suite_ran_nothing(self):
        # As Ginkgo reports it: the BeforeSuite failed, no spec is in the report.
        junit = report([("[BeforeSuite]", "failed", "no kubeconfig\nstack"), ("[AfterSuite]", "passed", "")],
                       succeeded=False)
        code, printed = Run(self).partition("capstan-0", junit, exit_code=1).expect()
        self.assertEqual(code, 1)
        self.assertIn("[BeforeSuite] failed: no kubeconfig", printed)
        self.assertIn("(0 passed)", printed)
        for name in SPECS:
            self.assertIn(f"did not run: {name}", printed)

    def test_a_listed_spec_left_out(self):
        code, printed = Run(self).partition("capstan-0", good_run(skip=[SPECS[3]])).expect()
        self.assertEqual(code, 1)
        self.assertIn(f"did not run: {SPECS[3]}", printed)
        self.assertNotIn(f"did not run: {SPECS[4]}", printed)

    def test_a_listed_spec_failed(self):
        code, printed = Run(self).partition("capstan-0", good_run(fail=[SPECS[-1]])).expect()
        self.assertEqual(code, 1)
        self.assertIn(f"failed: {SPECS[-1]} (failed: Expected success, got an error)", printed)
        self.assertIn(f"the {suite_of(SPECS[-1])[0]} suite exited with status 1", printed)

    def test_a_spec_not_listed_ran(self):
        code, printed = Run(self).partition("capstan-0", good_run(extra=[OTHERS[0]])).expect()
        self.assertEqual(code, 1)
        self.assertIn(f"ran but not expected: {OTHERS[0]}", printed)

    def test_the_suite_failed_around_passing_specs(self):
        junit = good_run(tail=[("[AfterSuite]", "failed", "cleanup")])
        code, printed = Run(self).partition("capstan-0", junit).expect()
        self.assertEqual(code, 1)
        self.assertIn("[AfterSuite] failed: cleanup", printed)
        self.assertIn("Suite Timeout Elapsed", printed)

    def test_every_controller_is_checked(self):
        run = Run(self).partition("capstan-0", good_run()).partition("karpenter-0", None)
        code, printed = run.expect("capstan", "karpenter")
        self.assertEqual(code, 1)
        self.assertIn("capstan: all", printed)
        self.assertIn("karpenter did not run exactly", printed)


class Focus(unittest.TestCase):
    def test_the_focus_selects_exactly_the_listed_specs(self):
        # Python's re reads the quoted texts as Go's regexp does.
        focus = re.compile(summary.focus(SPECS))
        for name in SPECS:
            self.assertTrue(focus.search(name), name)
            self.assertFalse(focus.search(f"{name} and more"), name)
            self.assertFalse(focus.search(suite_of(name)[1]), name)
        for name in OTHERS:
            self.assertFalse(focus.search(name), name)

    def test_every_listed_spec_names_a_suite_and_an_area(self):
        for name in SPECS:
            suite_of(name)
            self.assertIsNotNone(summary.area(name), name)

    def test_the_list_has_no_duplicates_and_is_not_empty(self):
        with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
            f.write("# nothing\n\n")
            f.flush()
            with self.assertRaises(SystemExit):
                summary.read_specs(f.name)
        with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
            f.write("A b\nA b\n")
            f.flush()
            with self.assertRaises(SystemExit):
                summary.read_specs(f.name)


class Check(unittest.TestCase):
    def test_a_missing_report_fails_the_check(self):
        run = Run(self).partition("capstan-0", None)
        code, printed = run.main("--check", run.out, "capstan")
        self.assertEqual(code, 1)
        self.assertIn("no JUnit report", printed)

    def test_a_failed_before_suite_fails_the_check(self):
        junit = report([("[BeforeSuite]", "failed", "boom")], succeeded=False)
        run = Run(self).partition("capstan-0", junit)
        code, printed = run.main("--check", run.out, "capstan")
        self.assertEqual(code, 1)
        self.assertIn("[BeforeSuite] failed: boom", printed)

    def test_specs_the_control_passes_and_the_first_never_ran(self):
        run = Run(self).partition("capstan-0", report([("[BeforeSuite]", "passed", "")])) \
            .partition("karpenter-0", good_run())
        code, printed = run.main("--check", run.out, "capstan", "karpenter")
        self.assertEqual(code, 1)
        self.assertIn(f"not run: {SPECS[0]}", printed)

    def test_a_clean_run_passes_the_check(self):
        run = Run(self).partition("capstan-0", good_run()).partition("karpenter-0", good_run())
        code, printed = run.main("--check", run.out, "capstan", "karpenter")
        self.assertEqual(code, 0, printed)


if __name__ == "__main__":
    unittest.main()
