#!/usr/bin/env python3
"""The checks of summary.py fail when the suite did not run what it should: run with
`python3 -m unittest summary_test` in this directory (`make unit` does).

The reports are shaped as Ginkgo v2 writes them (--ginkgo.junit-report): one testsuite with the
suite's properties, a testcase per suite node and per spec, specs the focus left out "skipped".
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
    "Integration DaemonSet should account for LimitRange DefaultRequest on daemonSet pods for resources",
    "NodeClaim StandaloneNodeClaim should create a standard NodeClaim based on resource requests",
    "Drift should disrupt nodes that have drifted due to requirements",
]


def report(cases, succeeded=True, reason=""):
    """A Ginkgo JUnit report: cases are (name, status, message)."""
    suites = ET.Element("testsuites")
    suite = ET.SubElement(suites, "testsuite", name=summary.SUITE)
    properties = ET.SubElement(suite, "properties")
    for name, value in [("SuiteSucceeded", str(succeeded).lower()), ("SpecialSuiteFailureReason", reason)]:
        ET.SubElement(properties, "property", name=name, value=value)
    for name, status, message in cases:
        case = ET.SubElement(suite, "testcase", name=name, classname=summary.SUITE, status=status)
        if status == "skipped":
            ET.SubElement(case, "skipped", message=message or "skipped")
        elif status in ("failed", "timedout"):
            ET.SubElement(case, "failure", message=message, type=status)
        elif status in ("panicked", "interrupted"):
            ET.SubElement(case, "error", message=message, type=status)
    return ET.tostring(suites, encoding="unicode")


def good_run(skip=(), fail=(), extra=()):
    """The cases of a run of the fast focus: the listed specs passed (but `skip` left out by the
    focus and `fail` failed), the others left out, `extra` passed too."""
    cases = [("[BeforeSuite]", "passed", "")]
    for name in SPECS:
        if name in skip:
            cases.append((f"[It] {name}", "skipped", "skipped"))
        elif name in fail:
            cases.append((f"[It] {name}", "failed", "Expected success, got an error\nmore"))
        else:
            cases.append((f"[It] {name}", "passed", ""))
    cases += [(f"[It] {name}", "passed" if name in extra else "skipped", "") for name in OTHERS]
    cases.append(("[AfterSuite]", "passed", ""))
    return cases


class Run:
    """An OUT directory with partitions."""

    def __init__(self, test):
        tmp = tempfile.TemporaryDirectory()
        test.addCleanup(tmp.cleanup)
        self.out = tmp.name

    def partition(self, name, junit=None, exit_code=None):
        d = os.path.join(self.out, name)
        os.makedirs(d)
        if junit is not None:
            with open(os.path.join(d, "junit.xml"), "w") as f:
                f.write(junit)
        if exit_code is not None:
            with open(os.path.join(d, "suite-exit"), "w") as f:
                f.write(f"{exit_code}\n")
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
        run = Run(self).partition("capstan-0", report(good_run()), exit_code=0)
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
        code, printed = Run(self).partition("capstan-0", report(good_run(skip=[SPECS[3]])), exit_code=0).expect()
        self.assertEqual(code, 1)
        self.assertIn(f"did not run: {SPECS[3]}", printed)
        self.assertNotIn(f"did not run: {SPECS[4]}", printed)

    def test_a_listed_spec_failed(self):
        junit = report(good_run(fail=[SPECS[-1]]), succeeded=False)
        code, printed = Run(self).partition("capstan-0", junit, exit_code=1).expect()
        self.assertEqual(code, 1)
        self.assertIn(f"failed: {SPECS[-1]} (failed: Expected success, got an error)", printed)
        self.assertIn("the suite exited with status 1", printed)

    def test_a_spec_not_listed_ran(self):
        code, printed = Run(self).partition("capstan-0", report(good_run(extra=[OTHERS[0]])), exit_code=0).expect()
        self.assertEqual(code, 1)
        self.assertIn(f"ran but not expected: {OTHERS[0]}", printed)

    def test_the_suite_failed_around_passing_specs(self):
        junit = report(good_run() + [("[AfterSuite]", "failed", "cleanup")], succeeded=False,
                       reason="Suite Timeout Elapsed")
        code, printed = Run(self).partition("capstan-0", junit, exit_code=1).expect()
        self.assertEqual(code, 1)
        self.assertIn("[AfterSuite] failed: cleanup", printed)
        self.assertIn("Suite Timeout Elapsed", printed)

    def test_every_controller_is_checked(self):
        run = Run(self).partition("capstan-0", report(good_run()), 0).partition("karpenter-0", None)
        code, printed = run.expect("capstan", "karpenter")
        self.assertEqual(code, 1)
        self.assertIn("capstan: all", printed)
        self.assertIn("karpenter did not run exactly", printed)


class Focus(unittest.TestCase):
    def test_the_focus_selects_exactly_the_listed_specs(self):
        # Python's re reads the quoted texts as Go's regexp does.
        focus = re.compile(summary.focus(SPECS))
        for name in SPECS:
            self.assertTrue(focus.search(f"{summary.SUITE} {name}"), name)
            self.assertFalse(focus.search(f"{summary.SUITE} {name} and more"), name)
            self.assertFalse(focus.search(name), name)
        for name in OTHERS:
            self.assertFalse(focus.search(f"{summary.SUITE} {name}"), name)

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
            .partition("karpenter-0", report(good_run()))
        code, printed = run.main("--check", run.out, "capstan", "karpenter")
        self.assertEqual(code, 1)
        self.assertIn(f"not run: {SPECS[0]}", printed)

    def test_a_clean_run_passes_the_check(self):
        run = Run(self).partition("capstan-0", report(good_run())).partition("karpenter-0", report(good_run()))
        code, printed = run.main("--check", run.out, "capstan", "karpenter")
        self.assertEqual(code, 0, printed)


if __name__ == "__main__":
    unittest.main()
