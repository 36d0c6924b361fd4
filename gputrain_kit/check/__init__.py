"""Exercise checks: ``gputrain_kit.check.<exercise>(answer)`` says whether an answer is right.

Each check returns a ``Verdict`` (truthy when correct) whose repr is one plain sentence: correct; not a
form the check reads (and which form to give); or wrong, with a hint that does not give the answer away.
``...`` means "not answered yet". Every check reads its answer with the one reader, ``_common.read``, in any
equivalent form: NumPy scalars, numeric strings, fractions such as '3/11', a number among the question's own words
('300 samples', 'CUDA GPU 5'), tuples or arrays for lists; None, blank strings, NaN and infinities are never
right. One module per notebook.
"""
from __future__ import annotations

from ._common import Reading, Verdict, as_bool, as_choice, as_int, as_int_list, as_number, read
from .nb00 import *  # noqa: F401,F403
from .nb01 import *  # noqa: F401,F403
from .nb02 import *  # noqa: F401,F403
from .nb03 import *  # noqa: F401,F403
from .nb04 import *  # noqa: F401,F403
from .nb05 import *  # noqa: F401,F403
from .nb06 import *  # noqa: F401,F403
from .nb07 import *  # noqa: F401,F403
from .nb08 import *  # noqa: F401,F403
from .nb09 import *  # noqa: F401,F403
from .nb07 import NB07_HOSTS
from .nb09 import NB09_MLP

# Every notebook's exercise checks (nb00_... to nb09_...), then the forms they read answers in.
__all__ = sorted(name for name in globals() if name.startswith("nb0") and callable(globals()[name]))  # noqa: PLE0605
__all__ += ["Reading", "Verdict", "read", "as_bool", "as_choice", "as_int", "as_int_list", "as_number", "NB07_HOSTS",
            "NB09_MLP"]
