"""The tasks, chosen by name: the paper's ten (Section 3, Table tab:dataset-examples, Appendix D.1) and any
added to ``TASKS`` (docs/tasks.md says how).

``get(name, **options)`` builds one; ``task.examples(split, n, seed)`` gives its examples, each
with its length bucket λ; ``Tokenizer.for_task(task)`` gives its word-level tokenizer.
"""

from __future__ import annotations

from typing import Any

from probe.errors import ProbeError, did_you_mean
from probe.tasks.addition import Addition
from probe.tasks.base import SPLITS, Example, ScratchpadTask, Task
from probe.tasks.copy import Copy
from probe.tasks.lego import Lego
from probe.tasks.parity import Parity
from probe.tasks.pcfg import Pcfg
from probe.tasks.polynomial import Polynomial
from probe.tasks.reverse import Reverse
from probe.tasks.scan import Scan
from probe.tasks.scratchpad import FORMATS
from probe.tasks.sorting import Sorting
from probe.tasks.summation import Summation
from probe.tasks.tokenizer import Tokenizer

TASKS: dict[str, type[Task]] = {  # the one registry: get(), `probe tasks` and the per-task tests read it
    cls.name: cls for cls in (Copy, Reverse, Addition, Polynomial, Sorting, Summation, Parity, Lego, Scan, Pcfg)
}
SCRATCHPAD_TASKS = tuple(name for name, cls in TASKS.items() if issubclass(cls, ScratchpadTask))


def get(name: str, **options: Any) -> Task:
    """The task ``name`` with ``options`` (an unknown name or option raises ProbeError)."""
    try:
        cls = TASKS[name]
    except KeyError:
        hint = did_you_mean(str(name), list(TASKS))
        raise ProbeError(f"unknown task {name!r}{hint} (choose one of {', '.join(TASKS)})") from None
    return cls(**options)


def resolved_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` as given for task ``name``, each value as the task reads it (``scratchpad=c`` is ``C``,
    ``C+I`` is ``I+C``, ``I+C+O+V+R`` is ``full``), so one setting names one run folder and one config however
    it was typed. A value the task reads as its default absence (``scratchpad=none``) is kept as given, as
    earlier runs recorded it. An unknown option or value raises ProbeError, as :func:`get` does."""
    read = get(name, **options).options
    return {key: value if read.get(key) is None else read[key] for key, value in options.items()}


__all__ = [
    "FORMATS",
    "SCRATCHPAD_TASKS",
    "SPLITS",
    "TASKS",
    "Example",
    "Task",
    "Tokenizer",
    "get",
    "resolved_options",
]
