"""Entry point of one local worker: ``python -m gputrain_kit._worker SPEC.json``.

Imports TensorFlow quietly (its C++ start-up chatter would otherwise fill the
streamed log), then runs the script or the function the spec names. A function's
return value is sent back with ``report(result=...)``. On an exception the
traceback is printed without this file's own frames, and the exit status is 1.
"""
from __future__ import annotations

import json
import linecache
import os
import runpy
import sys
import traceback


def _die_with_launcher() -> None:
    """Linux: have the kernel SIGKILL this worker when its launcher dies (a restarted notebook kernel),
    so no worker outlives it holding ports and CPU. Set here, not between fork and exec: the launcher
    has threads running, where a pre-exec hook is unsafe."""
    from ._children.lifecycle import die_with_parent

    launcher = os.environ.get("GPUTRAIN_LAUNCHER_PID")
    if launcher:
        die_with_parent(int(launcher))


def _quiet_tensorflow() -> None:
    from ._tf import import_tf
    tf = import_tf()
    tf.get_logger().setLevel("ERROR")
    try:
        import absl.logging
        absl.logging.set_verbosity(absl.logging.ERROR)
    except ImportError:  # pragma: no cover
        pass


def _run(spec: dict) -> None:
    from ._children.protocol import report
    if spec["kind"] == "script":
        sys.argv = [spec["path"], *spec["args"]]
        sys.path.insert(0, os.path.dirname(spec["path"]))   # as `python job.py` would: its folder first
        runpy.run_path(spec["path"], run_name="__main__")
        return
    name = spec["name"]
    filename = f"<worker function {name}>"
    source = spec["source"]
    # Register the source so tracebacks show the failing line.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict = {"__name__": "__worker__", "report": report}
    exec(compile(source, filename, "exec"), namespace)
    result = namespace[name](**spec["kwargs"])
    report(result=result)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m gputrain_kit._worker SPEC.json", file=sys.stderr)
        return 2
    _die_with_launcher()
    with open(argv[1]) as f:
        spec = json.load(f)
    try:
        _quiet_tensorflow()
        _run(spec)
    except SystemExit as exit_:
        code = exit_.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, flush=True)          # sys.exit("message"): the message is the worker's last line
        return 1
    except BaseException as err:  # print the worker's own frames only
        tb = err.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename in (__file__, runpy.__file__, "<frozen runpy>"):
            tb = tb.tb_next
        sys.stdout.flush()
        print("".join(traceback.format_exception(type(err), err, tb)).rstrip(), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
