"""Command line: ``python -m gputrain_kit doctor | notebooks DIR [--force] | lab [DIR]``."""
from __future__ import annotations

import sys

USAGE = "usage: python -m gputrain_kit doctor [--quick] | notebooks DIR [--force] | lab [DIR]"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        print("  doctor      check versions, GPUs, the widgets extension, and run a smoke test")
        print("  notebooks   copy the course's notebooks into DIR (kept if already there, unless --force)")
        print("  lab         open JupyterLab on DIR (default gputrain-course), copying the notebooks there first")
        return 0 if argv else 2
    if argv[0] == "doctor":
        from .doctor import main as doctor_main
        return doctor_main(argv[1:])
    if argv[0] in ("notebooks", "lab"):
        from .course import copy_notebooks, lab_command

        rest = [a for a in argv[1:] if a != "--force"]
        if len(rest) > 1 or (argv[0] == "notebooks" and not rest):
            print(f"{argv[0]}: name one folder\n{USAGE}", file=sys.stderr)
            return 2
        folder = rest[0] if rest else "gputrain-course"
        try:
            copies = copy_notebooks(folder, force="--force" in argv)
        except FileExistsError as err:
            if argv[0] == "notebooks":
                print(err, file=sys.stderr)
                return 2
            copies = []                               # lab: open the learner's own copies as they are
        except (OSError, TypeError) as err:
            print(err, file=sys.stderr)
            return 2
        if copies:
            print(f"copied {len(copies)} notebooks into {folder}")
        if argv[0] == "lab":
            import subprocess
            return subprocess.call(lab_command(folder))
        return 0
    print(f"unknown command {argv[0]!r}\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
