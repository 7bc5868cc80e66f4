#!/usr/bin/env python3
"""Passed/failed/skipped per area of Karpenter's regression suite, one column group per controller.

    summary.py OUT CONTROLLER...          print the table (and write OUT/summary.md, OUT/junit.xml)
    summary.py --check OUT CONTROLLER...  exit 1 if the first controller fails a spec the others pass

Reads the JUnit reports the partitions wrote (OUT/<controller>-<n>/junit.xml). A spec counts in the
areas it was run for: specs a partition's focus left out are not counted.
"""

import glob
import os
import sys
import xml.etree.ElementTree as ET

AREAS = ["Integration", "NodeClaim", "Drift", "Expiration", "Termination", "StaticCapacity", "Chaos", "Performance",
         "CapacityBuffer"]


def results(out, controller):
    """{spec name: passed | failed | skipped} over the controller's partitions."""
    specs = {}
    for path in sorted(glob.glob(os.path.join(out, f"{controller}-*", "junit.xml"))):
        for case in ET.parse(path).getroot().iter("testcase"):
            name = case.get("name", "")
            if not name.startswith("[It] "):
                continue  # BeforeSuite / AfterSuite
            name = name[len("[It] "):]
            status = case.get("status", "")
            skipped = case.find("skipped")
            if status == "passed":
                specs[name] = "passed"
            elif status == "skipped" or skipped is not None:
                message = skipped.get("message", "") if skipped is not None else ""
                # Left out by the partition's focus: not this partition's spec.
                if "filter" in message or message.strip() in ("", "skipped"):
                    continue
                specs.setdefault(name, "skipped")
            elif status in ("pending", "interrupted"):
                continue  # not run to the end (a run stopped by Ctrl-C): not counted
            else:  # failed, timedout, panicked, interrupted, aborted
                specs[name] = "failed"
    return specs


def area(name):
    first = name.split(" ", 1)[0]
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
        bad = sorted(n for n, s in by[c].items() if s != "passed")
        if bad:
            notes.append(f"\n{c}, not passed:")
            notes += [f"  {by[c][n]}: {n}" for n in bad]
    return by, "\n".join(lines) + "\n" + "\n".join(notes) + "\n"


def merge_junit(out, controllers):
    suites = ET.Element("testsuites")
    for c in controllers:
        for path in sorted(glob.glob(os.path.join(out, f"{c}-*", "junit.xml"))):
            for suite in ET.parse(path).getroot().iter("testsuite"):
                suite.set("name", f"{c}/{os.path.basename(os.path.dirname(path))}: {suite.get('name', '')}")
                suites.append(suite)
    ET.ElementTree(suites).write(os.path.join(out, "junit.xml"), encoding="utf-8", xml_declaration=True)


def main(argv):
    check = argv[:1] == ["--check"]
    if check:
        argv = argv[1:]
    if len(argv) < 2:
        sys.exit(__doc__)
    out, controllers = argv[0], argv[1:]
    by, text = table(out, controllers)
    if check:
        first, others = controllers[0], controllers[1:]
        worse = sorted(
            n for n, s in by[first].items()
            if s != "passed" and (not others or any(by[o].get(n) == "passed" for o in others))
        )
        if worse:
            print(f"{first} does not pass {len(worse)} spec(s)" + (" the control passes:" if others else ":"))
            for n in worse:
                print(f"  {n}")
            sys.exit(1)
        return
    print(text)
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(text)
    merge_junit(out, controllers)
    print(f"JUnit: {os.path.join(out, 'junit.xml')} (and one per partition)")


if __name__ == "__main__":
    main(sys.argv[1:])
