"""Reads CTest's JUnit report (ctest --output-junit) and fails, naming each, for every test that
did not run (skipped: SKIP_RETURN_CODE, GoogleTest's GTEST_SKIP; disabled), unless it is a
`_long` variant and CKPTFS_LONG_TESTS is not 1, or it is allowed: named by an argument
"NAME: REASON" (the reason is printed). Also fails when the report lists no test.

Usage: check_skips.py JUNIT_XML ["NAME: REASON"...]
"""
import os
import sys
import xml.etree.ElementTree as ET


def why_not_run(case):
    """CTest's reason, and the test's own: the first line of its output that says it skipped
    and the line after it (GoogleTest prints its message there)."""
    skipped = case.find("skipped")
    why = [skipped.get("message", "") if skipped is not None else case.get("status")]
    lines = [line.strip() for line in (case.findtext("system-out") or "").splitlines()]
    for i, line in enumerate(lines):
        if "skip" in line.lower():
            why += [l for l in lines[i:i + 2] if l]
            break
    return " | ".join(why)


def main():
    report, allowed = sys.argv[1], {}
    for entry in sys.argv[2:]:
        name, _, reason = entry.partition(":")
        if not reason.strip():
            print(f"ci: allowed skip without a reason: {entry!r}", file=sys.stderr)
            return 1
        allowed[name.strip()] = reason.strip()
    cases = list(ET.parse(report).getroot().iter("testcase"))
    if not cases:
        print(f"ci: {report} lists no tests", file=sys.stderr)
        return 1
    long_tests_run = os.environ.get("CKPTFS_LONG_TESTS") == "1"
    refused = []
    for case in cases:
        name = case.get("name")
        if case.get("status") not in ("notrun", "disabled") and case.find("skipped") is None:
            continue
        if name.endswith("_long") and not long_tests_run:
            continue
        if name in allowed:
            print(f"ci: skipped, as allowed: {name} ({allowed[name]})")
            continue
        refused.append(f"  {name}: {why_not_run(case)}")
    if refused:
        print(f"ci: {len(refused)} test(s) did not run, and .ci/run does not allow them to skip:\n"
              + "\n".join(refused), file=sys.stderr)
        return 1
    print(f"ci: {len(cases)} tests, none skipped but those allowed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
