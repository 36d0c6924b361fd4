"""Every case of tests/error_cases.py: raised at the call, the right kind, naming the function and the
argument, short; docs/errors.md is exactly what those cases produce."""
from __future__ import annotations

import json
import sys

import pytest

from conftest import ROOT, run_python

sys.path.insert(0, str(ROOT / "tests"))
import error_cases  # noqa: E402

ALLOWED = {"TypeError", "ValueError", "FileNotFoundError", "SetupError"}


@pytest.fixture(scope="module")
def results():
    proc = run_python("import json, sys; sys.path.insert(0, 'tests'); import error_cases; "
                      "print(json.dumps(error_cases.run()))", timeout=300)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_case_ran(results):
    assert [(r["function"], r["given"]) for r in results] == [(c[0], c[2]) for c in error_cases.CASES]


@pytest.mark.parametrize("index", range(len(error_cases.CASES)),
                         ids=[f"{c[0]}: {c[2]}" for c in error_cases.CASES])
def test_the_error_is_clear(results, index):
    r = results[index]
    if "(a warning)" in r["given"]:      # legal but suspicious arguments: the call works and warns
        assert r["type"] == "no error" and r["warnings"], f"{r['code']} gave no warning"
        message = r["warnings"][0]
    else:
        assert r["type"] != "no error", f"{r['code']} was accepted"
        assert ALLOWED & set(r["bases"]), f"{r['type']} ({r['bases']}) is not a TypeError/ValueError"
        message = r["message"]
    function = r["function"].split(".")[-1]         # measure.measure_levers -> measure_levers; a method keeps its class
    assert (message.startswith((function, r["function"])) or f"{function}(" in message[:40]), message
    if r["argument"]:
        assert r["argument"] in message, message
    assert len(message) <= 600, f"{len(message)} characters: {message[:200]} ..."
    assert "0x7f" not in message and "__array__" not in message


def test_docs_errors_md_is_generated_from_these_cases(results):
    expected = error_cases.render(results)
    current = (ROOT / "docs" / "errors.md").read_text()
    assert current == expected, "docs/errors.md is out of date: run `make errors-doc`"
