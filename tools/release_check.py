"""`make release-check`: the release steps a tag's workflow runs, here. Builds the sdist and the wheel with
`python -m build` (in a throwaway venv, so the course's own venv keeps exactly its pins), checks what each carries
(every notebook in both; constraints.txt, the changelog and the licence in the sdist), then installs the wheel in a
clean venv and runs notebook 00 there (tests/project/test_wheel.py, handed this wheel). Minutes.

    python tools/release_check.py [--dist DIR]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import tempfile
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build(dist: Path) -> tuple[Path, Path]:
    """The sdist and the wheel, built from this clone into ``dist`` (emptied first)."""
    dist.mkdir(parents=True, exist_ok=True)
    for old in dist.glob("gputrain_kit-*"):
        old.unlink()
    with tempfile.TemporaryDirectory() as tmp:
        venv.create(tmp, with_pip=True)
        python = str(Path(tmp) / "bin" / "python")
        subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "build>=1.2"],
                       check=True)
        subprocess.run([python, "-m", "build", "--outdir", str(dist), str(ROOT)], check=True)
    return next(dist.glob("gputrain_kit-*.tar.gz")), next(dist.glob("gputrain_kit-*.whl"))


def missing(sdist: Path, wheel: Path) -> list[str]:
    """What a release must carry and does not."""
    notebooks = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    with tarfile.open(sdist) as tar:
        in_sdist = {Path(name).relative_to(Path(name).parts[0]).as_posix() for name in tar.getnames()
                    if len(Path(name).parts) > 1}
    with zipfile.ZipFile(wheel) as zf:
        in_wheel = set(zf.namelist())
    gaps = [f"sdist: {name}" for name in ("constraints.txt", "CHANGELOG.md", "LICENSE", "pyproject.toml")
            if name not in in_sdist]
    gaps += [f"sdist: notebooks/{n}" for n in notebooks if f"notebooks/{n}" not in in_sdist]
    gaps += [f"wheel: gputrain_kit/notebooks/{n}" for n in notebooks if f"gputrain_kit/notebooks/{n}" not in in_wheel]
    gaps += [f"wheel: gputrain_kit/{n}" for n in ("presets.json", "gpu_record.json") if f"gputrain_kit/{n}" not in in_wheel]
    return gaps


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dist", default=str(ROOT / "dist"), help="where the sdist and the wheel go")
    args = parser.parse_args(argv)
    sdist, wheel = build(Path(args.dist))
    print(f"built {sdist.name} and {wheel.name}")
    gaps = missing(sdist, wheel)
    if gaps:
        print("the release lacks:\n  " + "\n  ".join(gaps), file=sys.stderr)
        return 1
    print("both carry every notebook; the sdist carries constraints.txt, CHANGELOG.md and LICENSE")
    env = dict(os.environ, GPUTRAIN_WHEEL=str(wheel), CUDA_VISIBLE_DEVICES="")
    return subprocess.call([sys.executable, "-m", "pytest", str(ROOT / "tests/project/test_wheel.py"), "-m", "wheel",
                            "-p", "no:cacheprovider", "-q"], env=env, cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
