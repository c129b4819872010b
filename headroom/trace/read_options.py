"""How traces are read: the options every trace-reading command and API function takes, in one object.

    from headroom.trace.read_options import ReadOptions
    ReadOptions(window="execute_model", lenient=True)      # --window execute_model --lenient

The CLI builds one from its flags (`ReadOptions.from_flags`), the API functions take one (`read=`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Union

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class ReadOptions:
    """How a trace is read and classified (each field a flag of the trace-reading commands).

    `rules`: a TOML file of extra classification rules, tried first (--rules); `policy`: a TOML file
    overriding which categories are addressable (--policy); `whole_trace`: analyse the whole trace, not
    only the ProfilerStep ranges (--whole-trace); `window`: the steps are the CPU ranges whose name matches
    this regex (--window); `lenient`: drop impossible GPU times with a counted warning instead of refusing
    the trace (--lenient); `use_cache`: read and write the trace's columnar cache (off: --no-cache);
    `graph_source`: a trace of the same step run eagerly, or holding its CUDA graph's capture, that gives kernels
    replayed from a graph their op, module and phase (--graph-source; docs/graphs.md).
    """

    rules: PathLike | None = None
    policy: PathLike | None = None
    whole_trace: bool = False
    window: str | None = None
    lenient: bool = False
    use_cache: bool = True
    graph_source: PathLike | None = None

    @classmethod
    def from_flags(
        cls,
        rules: PathLike | None,
        policy: PathLike | None,
        whole_trace: bool,
        window: str | None,
        lenient: bool,
        no_cache: bool,
        graph_source: PathLike | None = None,
    ) -> ReadOptions:
        """The options of a command line's --rules, --policy, --whole-trace, --window, --lenient, --no-cache,
        --graph-source."""
        return cls(
            rules=rules,
            policy=policy,
            whole_trace=whole_trace,
            window=window,
            lenient=lenient,
            use_cache=not no_cache,
            graph_source=graph_source,
        )
