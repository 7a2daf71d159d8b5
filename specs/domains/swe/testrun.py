"""The test runner that the swe domain sends into an environment (stdlib only, run by ``/usr/bin/python3``).

Run as ``python3 -c <this file's source>`` in the project's directory, with a JSON request on
stdin::

    {"hidden": {"check_x.py": "<source>", ...}, "visible": true, "probes": {"setup": "...", "exprs": [...]}}

It writes the hidden tests into a fresh temporary directory (never the project; removed after), runs them with
``unittest`` against the project in the current directory, optionally runs the project's own suite
(``tests/``) and evaluates probe expressions (``repr`` of the value, or ``raises <Error>: <message>``),
and prints one last line ``SWE-RESULT <nonce> <json>`` (the request's ``nonce``, so output the
project prints cannot pass for the report)::

    {"hidden_ran": 21, "hidden_failing": ["check_x.C.test_y", ...], "reasons": {"check_x.C.test_y": "..."},
     "visible_ok": true, "probes": ["Interval(2, 5)", "raises ValueError: ..."]}

The marker line is what counts: anything the project prints on import stays before it. Used by the
evaluator (``hooks.py``, hidden tests only) and by the generator (``generate.py``, to keep a mutant
only when a hidden test fails and to write the issue text from the probes that changed).
"""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
import unittest
from typing import Any

MARKER = "SWE-RESULT "


def _ids(pairs: list[tuple[unittest.TestCase, str]]) -> list[tuple[str, str]]:
    found = []
    for case, trace in pairs:
        last = [line for line in trace.strip().splitlines() if line.strip()][-1:] or [""]
        found.append((case.id(), last[0].strip()[:200]))
    return found


def _run(suite: unittest.TestSuite) -> unittest.TestResult:
    runner = unittest.TextTestRunner(stream=io.StringIO(), verbosity=0)
    return runner.run(suite)


def _hidden(files: dict[str, str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="swe-hidden-") as folder:
        for name, source in files.items():
            with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
                f.write(source)
        sys.path.insert(0, folder)
        sys.path.insert(1, os.getcwd())
        suite = unittest.defaultTestLoader.discover(folder, pattern="check_*.py", top_level_dir=folder)
        result = _run(suite)
    failing = _ids(result.failures) + _ids(result.errors)
    return {
        "hidden_ran": result.testsRun,
        "hidden_failing": sorted(name for name, _ in failing),
        "reasons": dict(sorted(failing)),
    }


def _visible() -> bool:
    suite = unittest.defaultTestLoader.discover("tests", top_level_dir=".")
    result = _run(suite)
    return result.wasSuccessful() and result.testsRun > 0


def _probes(setup: str, exprs: list[str]) -> list[str]:
    scope: dict[str, Any] = {}
    exec(setup, scope)
    results = []
    for expr in exprs:
        try:
            results.append(repr(eval(expr, scope)))
        except Exception as e:  # a probe's exception is its result
            results.append(f"raises {type(e).__name__}: {e}")
    return results


def main() -> None:
    request = json.loads(sys.stdin.read())
    report: dict[str, Any] = _hidden(request.get("hidden", {}))
    if request.get("visible"):
        report["visible_ok"] = _visible()
    probes = request.get("probes")
    if probes:
        report["probes"] = _probes(probes["setup"], probes["exprs"])
    sys.stdout.flush()
    print("\n" + MARKER + str(request.get("nonce", "")) + " " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
