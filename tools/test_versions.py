"""`make test-versions`: the claim tests on the oldest supported TensorFlow/Keras, in a venv of their own.

The course's stored outputs are made with the versions constraints.txt pins (the newest). This checks that what
the tests assert about TensorFlow's and Keras's behaviour still holds at the other end of the range that
pyproject.toml declares. It creates ``.venv-versions/`` (or reuses it while its stamp names the same versions, the
same Python and the same pyproject.toml), installs the kit there WITHOUT constraints.txt (``-e '.[test]'``, with the
TensorFlow and Keras versions given as explicit requirements, so pip keeps them and resolves the rest), prints the
versions, then runs the claim tests there the way ``make unit`` runs tests (the ``timing`` ones alone, after the rest).
Its exit status is pytest's.

    python tools/test_versions.py                           # the oldest pair: TensorFlow 2.18.1, Keras 3.10.0
    python tools/test_versions.py --tf 2.19 --keras 3.15.1  # another point (2.19 means the newest 2.19.x)
    TF=2.20.0 KERAS=3.12.0 make test-versions               # the same through make (or make test-versions TF=...)
    python tools/test_versions.py -- -k bfloat16            # anything after -- goes to pytest

docs/versions.md records what was run, on which CPU, and every difference found between versions.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The oldest pair of the range pyproject.toml declares (tensorflow>=2.18,<2.22, keras>=3.10): TensorFlow 2.18.1 (the
# newest 2.18.x) with Keras 3.10.0. Unconstrained, pip resolves Keras 3.15.1 for TensorFlow 2.18.1 (TensorFlow 2.18
# asks only for keras>=3.5), but Colab and Kaggle keep their older Keras, and the kit's first notebook cell pins it:
# the oldest Keras is the one to check. docs/versions.md lists every pair that was run, and what differs.
DEFAULT_TF = "2.18.1"
DEFAULT_KERAS = "3.10.0"

# The project's constraints pin the `tensorflow` distribution (not `tensorflow-cpu`); the same one here.
TF_DISTRIBUTION = "tensorflow"

# The tests that assert TensorFlow/Keras behaviour (what a notebook claims, the kernels, BatchNorm, the traps).
CLAIM_TESTS = [
    "tests/claims/test_nb01_claims.py",
    "tests/claims/test_nb02_claims.py",
    "tests/claims/test_nb03_claims.py",
    "tests/claims/test_nb04_claims.py",
    "tests/claims/test_nb05_claims.py",
    "tests/claims/test_nb06.py",
    "tests/claims/test_nb08_truths.py",
    "tests/claims/test_cpu_kernels.py",
    "tests/unit/test_unseen_models.py",
    "tests/claims/test_batchnorm.py",
    "tests/claims/test_known_traps.py",  # included where it exists
]

STAMP_NAME = ".installed-versions"


def requirement(name: str, version: str) -> str:
    """``2.18.1`` pins that release; ``2.18`` (two parts) means the newest 2.18.x."""
    parts = version.split(".")
    if not version or not all(p.isdigit() for p in parts) or not 2 <= len(parts) <= 3:
        raise SystemExit(f"test_versions: {name} version {version!r}: give MAJOR.MINOR or MAJOR.MINOR.PATCH")
    return f"{name}=={version}.*" if len(parts) == 2 else f"{name}=={version}"


def wanted_stamp(python: str, tf_req: str, keras_req: str) -> dict:
    pyproject = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]
    return {"python": python, "tensorflow": tf_req, "keras": keras_req, "pyproject": pyproject}


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def run(cmd: list[str], **kw) -> None:
    print("+ " + shlex.join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT, **kw)


def ensure_venv(venv: Path, python: str, tf_req: str, keras_req: str) -> None:
    """Create or reuse ``venv`` with exactly these requirements; a venv whose stamp differs is made anew."""
    stamp = venv / STAMP_NAME
    want = wanted_stamp(python, tf_req, keras_req)
    if stamp.exists() and venv_python(venv).exists():
        try:
            have = json.loads(stamp.read_text())
        except ValueError:
            have = None
        if have == want:
            print(f"reusing {venv.name}/ (its stamp names {tf_req}, {keras_req})", flush=True)
            return
        print(f"{venv.name}/ was made for {have}; making it anew for {want}", flush=True)
    if venv.exists():
        if not (venv / "pyvenv.cfg").exists():
            raise SystemExit(f"test_versions: {venv} exists and is not a venv; remove it or pass --venv")
        shutil.rmtree(venv)
    began = time.monotonic()
    run([python, "-m", "venv", str(venv)])
    py = str(venv_python(venv))
    run([py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--upgrade", "pip"])
    # No constraints.txt: pip resolves everything else for these two pins, as a learner's `pip install` would.
    try:
        run([py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-e", ".[test]", tf_req, keras_req])
    except subprocess.CalledProcessError:
        version = subprocess.run([py, "-c", "import platform; print(platform.python_version())"],
                                 capture_output=True, text=True).stdout.strip()
        print(f"test_versions: pip could not install {tf_req} and {keras_req} with the kit on Python {version} "
              "(its message above); TensorFlow 2.18 and 2.19 have wheels for Python 3.9-3.12 only: pass "
              "--python python3.11 (or PYTHON=python3.11 to make)", file=sys.stderr)
        raise SystemExit(1) from None
    stamp.write_text(json.dumps(want, indent=1) + "\n")
    print(f"installed in {time.monotonic() - began:.0f} s", flush=True)


VERSIONS_CODE = """
import importlib.metadata as md, json, platform
names = ["tensorflow", "tensorflow-cpu", "keras", "tf_keras", "numpy", "ml_dtypes", "h5py", "protobuf", "tensorboard", "scikit-learn"]
out = {"python": platform.python_version()}
for name in names:
    try:
        out[name] = md.version(name)
    except md.PackageNotFoundError:
        out[name] = None
print(json.dumps(out))
"""


def installed_versions(venv: Path) -> dict:
    proc = subprocess.run([str(venv_python(venv)), "-c", VERSIONS_CODE], capture_output=True, text=True,
                          check=True, cwd=ROOT)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def matches(version: str | None, req: str) -> bool:
    want = req.split("==", 1)[1]
    return version is not None and (version.startswith(want[:-1]) if want.endswith(".*") else version == want)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tf", default=os.environ.get("TF") or DEFAULT_TF,
                        help=f"TensorFlow version (env TF; default {DEFAULT_TF})")
    parser.add_argument("--keras", default=os.environ.get("KERAS") or DEFAULT_KERAS,
                        help=f"Keras version (env KERAS; default {DEFAULT_KERAS})")
    parser.add_argument("--venv", default=os.environ.get("VERSIONS_VENV") or ".venv-versions",
                        help="the venv to create or reuse (default .venv-versions, relative to the repository)")
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter the venv is made from (default: this one)")
    parser.add_argument("--workers", type=int, default=int(os.environ.get("UNIT_WORKERS") or 2),
                        help="pytest-xdist processes (default 2, as make unit)")
    args, pytest_args = parser.parse_known_args(argv)
    pytest_args = [a for a in pytest_args if a != "--"]

    began = time.monotonic()
    tf_req, keras_req = requirement(TF_DISTRIBUTION, args.tf), requirement("keras", args.keras)
    venv = (ROOT / args.venv).resolve()
    python = shutil.which(args.python) or args.python
    ensure_venv(venv, python, tf_req, keras_req)

    versions = installed_versions(venv)
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items() if v), flush=True)
    dist = TF_DISTRIBUTION
    if not matches(versions.get(dist), tf_req) or not matches(versions.get("keras"), keras_req):
        print(f"test_versions: {venv.name}/ holds tensorflow {versions.get(dist)}, keras {versions.get('keras')}, "
              f"not {tf_req}, {keras_req}: remove {venv.name}/ and run again", file=sys.stderr)
        return 2

    files = [f for f in CLAIM_TESTS if (ROOT / f).exists()]
    missing = sorted(set(CLAIM_TESTS) - set(files))
    if missing:
        print("not there, left out: " + ", ".join(missing), flush=True)
    # As `make unit`: the files on parallel processes, then the tests marked `timing` alone (a share of measured
    # time, which a test beside them would distort). Both always run; either failing fails the whole.
    base = [str(venv_python(venv)), "-m", "pytest", "-p", "no:cacheprovider"]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    status = 0
    for cmd in (base + ["-n", str(args.workers), "--dist", "loadfile", "-m", "not timing and not wheel"],
                base + ["-p", "no:xdist", "-m", "timing"]):
        cmd += files + pytest_args
        print("+ " + shlex.join(cmd), flush=True)
        code = subprocess.run(cmd, cwd=ROOT, env=env).returncode
        status = status or (0 if code == 5 else code)       # 5: no test selected (e.g. -k matched none here)
    print(f"test-versions: tensorflow {versions.get(dist)}, keras {versions.get('keras')}, "
          f"python {versions.get('python')}: pytest exit {status}, {time.monotonic() - began:.0f} s in all",
          flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
