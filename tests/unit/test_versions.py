"""The supported range as `doctor` states it (issue 46): what fails, what warns and names the notebooks it stops."""
from __future__ import annotations

import tomllib

import pytest

from conftest import ROOT
from gputrain_kit.versions import TENSORFLOW_RANGE, check_versions, version_tuple


def by_name(found):
    return {f.name: f for f in found}


@pytest.mark.parametrize("tf, status", [("2.17.1", "FAIL"), ("2.16.2", "FAIL"), ("2.18.0", "ok"), ("2.19.1", "ok"),
                                        ("2.21.0", "ok"), ("2.21.0rc1", "ok"), ("2.22.0", "warn"), ("3.0.0", "warn")])
def test_tensorflow_range(tf, status):
    found = by_name(check_versions(tf, "3.15.1", "0.7.0"))["TensorFlow"]
    assert found.status == status, found
    if status != "ok":
        assert "2.18 to 2.21" in found.detail


@pytest.mark.parametrize("keras, status, notebooks", [
    ("2.15.0", "FAIL", ()), ("3.0.5", "FAIL", ()), ("3.9.2", "FAIL", ()),
    ("3.10.0", "warn", ("03",)), ("3.14.0", "warn", ("03",)), ("3.15.1", "ok", ()), ("3.16.0.dev2026", "ok", ())])
def test_keras_range_and_notebook_03(keras, status, notebooks):
    found = by_name(check_versions("2.21.0", keras, "0.7.0"))["Keras"]
    assert (found.status, found.notebooks) == (status, notebooks), found
    if status == "FAIL":
        assert "pip install" in found.detail or "TF_USE_LEGACY_KERAS" in found.detail


def test_jax_is_needed_by_notebook_09_only():
    missing = by_name(check_versions("2.21.0", "3.15.1", None))["JAX"]
    assert missing.status == "warn" and missing.notebooks == ("09",) and "pip install 'jax>=0.6'" in missing.detail
    old = by_name(check_versions("2.21.0", "3.15.1", "0.5.3"))["JAX"]
    assert old.status == "warn" and old.notebooks == ("09",)
    assert by_name(check_versions("2.21.0", "3.15.1", "0.7.2"))["JAX"].status == "ok"


def test_the_range_is_pyprojects():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    low, high = TENSORFLOW_RANGE
    assert f"tensorflow>={low[0]}.{low[1]},<{high[0]}.{high[1] + 1}" in deps
    assert version_tuple("2.21.0+cu12") == (2, 21, 0) and version_tuple("3.16.0.dev2026") == (3, 16, 0)


def test_doctor_says_it_and_fails_only_what_the_course_cannot_survive():
    from gputrain_kit.doctor import FAIL, OK, WARN, version_checks

    lines = {c.name: c for c in version_checks("2.21.0", "3.12.4", None)}
    assert lines["TensorFlow"].status == OK
    assert lines["Keras"].status == WARN and "notebook 03" in lines["Keras"].detail
    assert lines["JAX"].status == WARN and "notebook 09" in lines["JAX"].detail
    assert {c.status for c in version_checks("2.17.1", "3.15.1", "0.7.0")} == {FAIL, OK}
    assert "[FAIL] Keras: 3.9.2" in next(c.line() for c in version_checks("2.21.0", "3.9.2", "0.7.0")
                                          if c.name == "Keras")
