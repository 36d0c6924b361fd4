"""Command line: ``python -m gputrain_kit doctor | notebooks DIR [--force] | lab [DIR] [--force] [-- JUPYTER ARGS]``."""
from __future__ import annotations

import sys

USAGE = ("usage: python -m gputrain_kit doctor [--quick] | notebooks DIR [--force] | "
         "lab [DIR] [--force] [-- JUPYTER ARGS]")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        print("  doctor      check versions, GPUs, the widgets extension, and run a smoke test")
        print("  notebooks   copy the course's notebooks into DIR (kept if already there, unless --force)")
        print("  lab         open JupyterLab on DIR (default gputrain-course), copying the notebooks there first;")
        print("              arguments after -- go to JupyterLab (e.g. -- --port 8890 --no-browser); as root,")
        print("              --allow-root is added, as `make lab` does")
        return 0 if argv else 2
    if argv[0] == "doctor":
        from .doctor import main as doctor_main
        return doctor_main(argv[1:])
    if argv[0] in ("notebooks", "lab"):
        from .course import copy_notebooks, lab_command

        ours, jupyter_args = _split_at_dashes(argv[1:])
        if jupyter_args and argv[0] == "notebooks":
            print(f"notebooks: arguments after -- are JupyterLab's, for `lab` only\n{USAGE}", file=sys.stderr)
            return 2
        if "--allow-root" in ours and argv[0] == "lab":      # JupyterLab's, typed before --: forwarded all the same
            ours = [a for a in ours if a != "--allow-root"]
            jupyter_args = ["--allow-root", *jupyter_args]
        rest = [a for a in ours if a != "--force"]
        flags = [a for a in rest if a.startswith("-")]
        if flags:
            print(f"{argv[0]}: unknown option {flags[0]!r}; JupyterLab's own options go after --, e.g. "
                  f"python -m gputrain_kit lab my-course -- {flags[0]}\n{USAGE}", file=sys.stderr)
            return 2
        if len(rest) > 1 or (argv[0] == "notebooks" and not rest):
            print(f"{argv[0]}: name one folder, got {len(rest)} ({' '.join(rest) or 'none'})\n{USAGE}",
                  file=sys.stderr)
            return 2
        if argv[0] == "lab":
            from .course import lab_missing
            missing = lab_missing()
            if missing:
                print(missing, file=sys.stderr)
                return 2
        folder = rest[0] if rest else "gputrain-course"
        try:
            copies = copy_notebooks(folder, force="--force" in ours)
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
            return subprocess.call(lab_command(folder, jupyter_args))
        return 0
    print(f"unknown command {argv[0]!r}\n{USAGE}", file=sys.stderr)
    return 2


def _split_at_dashes(args: list[str]) -> tuple[list[str], list[str]]:
    """The kit's own arguments, and those after ``--`` (JupyterLab's)."""
    if "--" in args:
        at = args.index("--")
        return args[:at], args[at + 1:]
    return args, []


if __name__ == "__main__":
    sys.exit(main())
