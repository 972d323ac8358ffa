"""pytest plugin of lilypad's train-native: each test's outcome as JSON.

Written to $LILYPAD_PYTEST_REPORT when the session ends: {nodeid: {"outcome", "duration",
"message"}}, one entry per test; a module that fails to import is reported under its own
node id with outcome "error".
"""
import json
import os

_results = {}
_RANK = {"passed": 0, "skipped": 1, "xfailed": 1, "xpassed": 1, "failed": 2, "error": 3}


def _record(nodeid, outcome, duration, message):
    entry = _results.setdefault(nodeid, {"outcome": "passed", "duration": 0.0, "message": ""})
    entry["duration"] += duration or 0.0
    if _RANK[outcome] >= _RANK[entry["outcome"]]:
        entry["outcome"] = outcome
        if message:
            entry["message"] = message[-4000:]


def pytest_runtest_logreport(report):
    message = ""
    if report.failed:
        outcome = "failed" if report.when == "call" else "error"
        message = report.longreprtext
    elif report.skipped:
        outcome = "xfailed" if hasattr(report, "wasxfail") else "skipped"
    elif report.when == "call" and hasattr(report, "wasxfail"):
        outcome = "xpassed"
    else:
        outcome = "passed"
    if report.when == "call" or outcome != "passed":
        _record(report.nodeid, outcome, report.duration, message)
    else:
        _record(report.nodeid, "passed", report.duration, "")


def pytest_collectreport(report):
    if report.failed:
        _record(report.nodeid or "<collection>", "error", 0.0, report.longreprtext)


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("LILYPAD_PYTEST_REPORT")
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"exitstatus": int(exitstatus), "tests": _results}, f)
