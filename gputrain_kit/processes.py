"""Run a snippet in a fresh Python process: the only way to try a different device set-up.

CUDA_VISIBLE_DEVICES and TensorFlow's device configuration are fixed per
process, so experiments with other values must run in a child.
"""
from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ._args import ArgumentTypeError, short, typed
from ._children.protocol import parse

__all__ = ["ChildResult", "ChildError", "run_child", "child_environment", "function_source", "BackgroundRun",
           "background_processes"]

# What a snippet run by run_child can use: send_back(...) (also named report), os and json; TensorFlow's start-up messages kept quiet.
_PRELUDE = ("import os, json\n"
            "from gputrain_kit._children.lifecycle import quiet_tensorflow; quiet_tensorflow()\n"
            "from gputrain_kit._children.protocol import report, send_back\n")


def child_environment(func: str, env: Mapping[str, str | None] | None,
                      base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with ``env`` applied; a value of None removes
    a variable. Raises ValueError, naming ``func``, for a name or value that is not a string."""
    merged = dict(os.environ if base is None else base)
    for key, value in (env or {}).items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"{func}: environment names are strings, got {short(key)}.")
        if value is None:
            merged.pop(key, None)
        elif not isinstance(value, str):
            raise ValueError(f"{func}: environment values are strings (None removes one), got {key}={short(value)}; "
                             f"write {key}={short(str(value))}.")
        else:
            merged[key] = value
    return merged


class ChildError(RuntimeError):
    """The child process failed; the message carries its last lines of output."""


@dataclass(frozen=True)
class ChildResult:
    returncode: int
    stdout: str
    stderr: str
    values: dict[str, Any]      # what the child passed to send_back(...)


def function_source(func: str, target: Any, *, what: str, closure_fix: str) -> str:
    """The source of ``target``, a function defined with ``def`` at the top level of a cell or a file,
    for a new process that receives only its source. Otherwise an error naming ``func``: ``what`` says
    what to pass, ``closure_fix`` how to do without an enclosing function's variables."""
    name = getattr(target, "__name__", "")
    if name == "<lambda>" or not inspect.isfunction(target):
        got = "a lambda" if name == "<lambda>" else typed(target)
        raise ArgumentTypeError(f"{func}: {what}, got {got}: a new process receives the function's source, which "
                                "a lambda or a callable object does not have.")
    if target.__code__.co_freevars:
        raise ValueError(f"{func}: {name}() uses variables of an enclosing function "
                         f"({', '.join(target.__code__.co_freevars)}). {closure_fix}")
    try:
        return textwrap.dedent(inspect.getsource(target))
    except (OSError, TypeError) as err:
        raise ValueError(f"{func}: cannot read the source of {name}() ({err}); define it in a notebook cell "
                         "or a .py file.") from err


_GIVEN = {"keras", "tf", "np"}          # what a shipped function finds in its new process without asking


def _globals_used(code: Any) -> set[str]:
    """Global names a function's code reads (LOAD_GLOBAL), nested functions and comprehensions included."""
    import dis

    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if inspect.iscode(const):
            names |= _globals_used(const)
    return names


def _is_literal(value: Any) -> bool:
    """Whether ``repr(value)`` is a Python literal that reads back as the same value (a constant a new process
    can receive as source); a list holding an array, say, is not."""
    import ast

    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return True
    if not isinstance(value, (tuple, list, dict)):
        return False
    try:
        return bool(ast.literal_eval(repr(value)) == value)
    except (ValueError, SyntaxError, TypeError):
        return False


def build_source(func: str, build: Any, *, returns: str, runs: str) -> str:
    """The source of a learner's zero-argument ``build`` function with what it needs from its module
    (``function_with_helpers``), for a process that receives source only; refused at the call, naming ``func``,
    when it is not a top-level ``def`` or takes arguments. ``returns``: what build must return; ``runs``: what runs
    in the fresh process ("It", "Each case")."""
    source = function_with_helpers(
        func, build, what=f"build must be a function defined with `def` that returns {returns}",
        closure_fix=f"{runs} runs in a fresh process that receives its source only: define it at the top level of "
                    "a cell or a script.")
    if build.__code__.co_argcount:
        raise ValueError(f"{func}: build must take no arguments; {build.__name__}() takes "
                         f"{build.__code__.co_argcount}. Fix its settings inside it.")
    return source


def _ipython_cells() -> list[str]:
    """The cells run in this IPython kernel, newest first, as Python (magics translated); [] outside IPython."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    cells = getattr(getattr(shell, "history_manager", None), "input_hist_parsed", None) or []
    return [cell for cell in reversed(cells) if isinstance(cell, str)]


def class_source(cls: type) -> str:
    """The source of a class defined at the top level of a file or a notebook cell. ``inspect.getsource`` reads
    a file's; for a class of a notebook (``__main__`` has no file, so inspect cannot find it) the cell that
    defined it: the cell its methods were compiled from, else the newest cell of this kernel's history that
    defines ``class <name>``. OSError, saying why, when neither holds it."""
    import ast
    import linecache

    try:
        return textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError) as err:
        why = str(err)
    if cls.__qualname__ != cls.__name__:
        raise OSError(f"it is defined inside a function or a class ({cls.__qualname__}), not at the top level")
    texts: list[tuple[str, int | None]] = []
    for value in vars(cls).values():
        function = getattr(value, "__func__", getattr(value, "fget", value))
        code = getattr(function, "__code__", None)
        if code is not None and getattr(function, "__qualname__", "").startswith(cls.__name__ + "."):
            texts.append(("".join(linecache.getlines(code.co_filename)), code.co_firstlineno))
    texts += [(cell, None) for cell in _ipython_cells()]
    for text, line in texts:
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in tree.body:
            if (isinstance(node, ast.ClassDef) and node.name == cls.__name__
                    and (line is None or node.lineno <= line <= (node.end_lineno or line))):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                return textwrap.dedent("".join(text.splitlines(True)[first - 1:node.end_lineno]))
    raise OSError(f"{why}; no file or notebook cell of this {'kernel' if _ipython_cells() else 'process'} "
                  f"defines class {cls.__name__}")


def _importable(value: Any, module_name: str) -> str | None:
    """``from <module> import <name>`` for a function or class of another module than ``module_name`` (a
    library's, say keras's Layer) that a new process can import as this one did; None for one to send as source."""
    module, name = getattr(value, "__module__", None), getattr(value, "__qualname__", "<>")
    if not module or module in (module_name, "__main__") or "<" in name or "." in name:
        return None
    return f"from {module} import {name}" if getattr(sys.modules.get(module), name, None) is value else None


def function_with_helpers(func: str, target: Any, *, what: str, closure_fix: str, import_given: bool = False) -> str:
    """``function_source`` plus what the function needs from its module, for a process that receives source
    only: the modules it uses (as imports), the functions and classes of its own module (a notebook's cells) it
    uses, and what those use in turn, base classes and decorators included (their source), those of other
    modules (imported), and plain constants (as literals): imports first, then constants, then definitions,
    each after what it uses. Anything else is refused here, naming it, before a process starts, instead of
    failing there with a NameError. ``import_given``: also import the modules of ``_GIVEN`` that it mentions
    (before the definitions; after a function sent alone, whose tracebacks then keep its own line numbers)."""
    import types

    source = function_source(func, target, what=what, closure_fix=closure_fix)
    imports: list[str] = []
    constants: list[str] = []
    definitions: list[str] = []
    shipped: set[str] = {target.__name__}
    user = target.__name__

    def ship(names: set[str], space: dict[str, Any]) -> None:
        for name in sorted(names):
            if name in shipped or name in _GIVEN or name not in space or name.startswith("__") and name.endswith("__"):
                continue                      # shipped already, given to it there, a builtin or __name__
            value = space[name]
            shipped.add(name)
            if isinstance(value, types.ModuleType):
                imports.append(f"import {value.__name__} as {name}")
                continue
            if not (inspect.isfunction(value) or inspect.isclass(value)):
                if not _is_literal(value):
                    raise ValueError(f"{func}: {user}() uses {name} ({type(value).__name__}) from its module, "
                                     f"which a new process cannot receive; create it inside {user}(). {closure_fix}")
                constants.append(f"{name} = {value!r}")
                continue
            imported = _importable(value, space.get("__name__", ""))
            if imported is not None:
                imports.append(f"{imported} as {name}")
                continue
            kind = "class" if inspect.isclass(value) else "function"
            definition: Any = value
            try:
                helper = class_source(definition) if kind == "class" else textwrap.dedent(inspect.getsource(value))
            except (OSError, TypeError) as err:
                raise ValueError(f"{func}: {user}() uses the {kind} {name}, whose source cannot be read ({err}); "
                                 f"define it with `{'class' if kind == 'class' else 'def'}` at the top level of a "
                                 f"notebook cell or a .py file, or inside {user}().") from None
            # what it uses, found in its own module: a class of the caller's module (a notebook's) in the caller's
            own = definition.__globals__ if kind == "function" else space if definition.__module__ == space.get(
                "__name__") else vars(sys.modules.get(definition.__module__, types.ModuleType("none")))
            ship(_globals_used(compile(helper, "<helper>", "exec")) - {name}, own)
            definitions.append(helper)

    ship(_globals_used(target.__code__), target.__globals__)
    prelude = imports + constants + definitions
    if import_given:     # np, tf, keras of its module, imported as here
        given = [f"import {target.__globals__[n].__name__} as {n}" for n in sorted(_GIVEN)
                 if isinstance(target.__globals__.get(n), types.ModuleType)
                 and any(re.search(rf"\b{n}\b", part) for part in prelude + [source])]
        if given and not prelude:
            return source + "".join("\n" + line for line in given)
        prelude = given + prelude
    return "\n".join(prelude + [source])


def run_child(code: str, *, env: Mapping[str, str | None] | None = None, timeout: float = 120) -> ChildResult:
    """Run ``code`` in a new interpreter of this environment and return what it reported.

    Inside the snippet, ``send_back(name=value, ...)`` sends JSON-able values back (``report`` is
    the same function under its older name).
    ``env`` adds variables to the child's environment; a value of None removes one.
    Raises ChildError (with the child's last output lines) when it fails or times out.
    """
    if not isinstance(code, str) or not code.strip():
        raise ValueError("run_child: code must be a non-empty string of Python source.")
    child_env = child_environment("run_child", env)
    source = _PRELUDE + textwrap.dedent(code)
    try:
        proc = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True,
                              timeout=timeout, env=child_env)
    except subprocess.TimeoutExpired as err:
        raise ChildError(f"child process did not finish within {timeout:.0f} s") from err
    values: dict[str, Any] = {}
    lines = []
    for line in proc.stdout.splitlines():
        reported = parse(line)
        if reported is not None:
            values.update(reported)
        else:
            lines.append(line)
    result = ChildResult(proc.returncode, "\n".join(lines), proc.stderr, values)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-6:])
        raise ChildError(f"child process exited with status {proc.returncode}:\n{tail}")
    return result


def built_here(build: Callable[[], Any]) -> Any:
    """``build()``'s model, built in this process without allocating its weights (``keras.StatelessScope``), to
    check it before any child process starts; None where TensorFlow's runtime has not started here (building
    would start it, and ``setup`` could not run after) or where ``build()`` raises (the child reports that)."""
    from . import _tf

    if not _tf.devices_initialised():
        return None
    import keras

    try:
        with keras.StatelessScope():
            return build()
    except Exception:
        return None


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def background_processes(jobs: int, *, waiting: bool = False) -> int:
    """How many child processes background work may run at once, at most ``jobs``: while the notebook works,
    the cores this process may use less one, left to its kernel, but 2 on a 2-core machine (notebook 05 there:
    one case at a time sped the kernel's own cells little, its TensorFlow uses both cores anyway, and made the
    whole notebook a third slower, 103 s against 76 s); once the notebook only waits (``waiting``), every core."""
    cores = _cores()
    return max(1, min(jobs, cores if waiting or cores <= 2 else cores - 1))


class BackgroundRun:
    """Work that runs child processes in a background thread, so that a notebook goes on meanwhile.

    ``work(advance)`` runs in the thread and returns the result; it calls ``advance(done)`` as each of
    its ``total`` items finishes. ``.progress_bar()`` is a widget that follows them, ``.result()`` waits.
    Subclasses name the items (``unit`` and ``units``, e.g. "case", "cases") and the bar (``bar_label``)."""

    unit = "item"
    units = "items"
    bar_label = "done"

    def __init__(self, work: Callable[[Callable[[int], None]], Any], total: int):
        import threading

        self.total, self.done = total, 0
        self._bars: list[Any] = []
        self._result: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(work,), daemon=True)
        self._thread.start()

    def _run(self, work: Callable[[Callable[[int], None]], Any]) -> None:
        try:
            self._result = work(self._advance)
        except BaseException as err:   # handed to the caller of result()
            self._error = err

    def _advance(self, done: int) -> None:
        self.done = done
        for bar, count in self._bars:
            bar.value = done
            count.value = self.count_text()

    def count_text(self) -> str:
        """How far the work is, in words: "3 of 6 cases"."""
        return f"{self.done} of {self.total} {self.unit if self.total == 1 else self.units}"

    def progress_bar(self):
        """A bar with a count ("3 of 6 cases") that follows the items as they finish (ipywidgets)."""
        import ipywidgets as widgets

        run = self

        class ProgressRow(widgets.HBox):
            def __repr__(self) -> str:          # what a notebook shows without widgets, e.g. on GitHub
                return f"{run.bar_label}: {run.count_text()}"

        bar = widgets.IntProgress(value=self.done, min=0, max=self.total, description=self.bar_label,
                                  style={"description_width": "initial"})
        count = widgets.Label(self.count_text())
        self._bars.append((bar, count))
        return ProgressRow([bar, count])

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the work (at most ``timeout`` seconds) and return its result."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"{type(self).__name__}.result: {self.total - self.done} {self.unit}(s) still "
                               f"running after {timeout} s; call result() again to keep waiting.")
        if self._error is not None:
            raise self._error
        return self._result
