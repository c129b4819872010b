"""The facade: `import headroom; headroom.analyze / project / targets / summary`, with .to_frame()."""

from __future__ import annotations

import dataclasses
import enum
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

import headroom
from headroom.errors import UserError
from headroom.jsonio import plain
from tests.conftest import SHIPPED_TRACES

DLRM = SHIPPED_TRACES / "dlrm.train.json.gz"


@pytest.fixture(scope="module")
def dlrm():
    return headroom.analyze(DLRM)


def test_analyze_and_its_frame(dlrm):
    assert isinstance(dlrm, headroom.Analysis) and dlrm.label == "dlrm train"
    f = dlrm.to_frame()
    # indexed by category name: .loc by name, the name still a column
    assert f["name"].iloc[0] == "gemm" and round(100 * f.loc["gemm", "fraction"], 1) == 36.3
    assert round(100 * f.loc[f["addressable"], "fraction"].sum(), 1) == 63.6


def test_project_matches_the_readme(dlrm):
    """README, "What it says": the DLRM trace with embedding kernels 1.552x faster."""
    r = headroom.project(dlrm, speedup=["category:embedding=1.552"])
    f = r.to_frame().set_index(["scenario", "method"])
    assert round(f.loc[("speedups", "amdahl"), "projected_ms_per_step"], 3) == 19.264
    assert round(f.loc[("speedups", "replay"), "projected_ms_per_step"], 3) == 19.499
    assert round(f.loc[("zero_time", "amdahl"), "projected_ms_per_step"], 3) == 18.269
    assert round(f.loc[("zero_time", "replay"), "projected_ms_per_step"], 3) == 19.003
    assert round(100 * f.loc[("speedups", "amdahl"), "gain"], 2) == 2.77
    assert f.loc[("speedups", "amdahl"), "measured_ms_per_step"] == pytest.approx(19.8137, abs=1e-4)


def test_project_from_a_path_and_a_file(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text('[[speedup]]\nselect = "category:embedding"\nspeedup = 1.552\n')
    r = headroom.project(DLRM, files=[f])
    assert round(r.get("amdahl").per_step_us / 1e3, 3) == 19.264 and r.entries[0].source == str(f)
    # a typed entry; its JSON object keeps the keys (and their order) of `headroom project --json`
    assert type(r.entries[0]).__name__ == "EntryResult" and r.entries[0].top_kernels[0].us > 0
    assert list(plain(r)["entries"][0]) == [
        "selector",
        "speedup",
        "launches",
        "verified",
        "source",
        "kernels",
        "us",
        "wall_us",
        "addressable_us",
        "applied_kernels",
        "applied_us",
        "applied_wall_us",
        "top_kernels",
    ]


def test_targets_result(dlrm):
    t = headroom.targets(dlrm, top=3)
    f = t.to_frame()
    assert f["name"].tolist()[:2] == ["aten::_index_put_impl_", "aten::mm"]
    assert round(100 * f.loc[0, "gain"], 2) == 9.18
    d = plain(t)
    assert d["speedup"] == 1.5 and d["targets"][0]["name"] == "aten::_index_put_impl_"


def test_summary_and_analyze_all():
    rows = headroom.summary(headroom.analyze_all(SHIPPED_TRACES / "scaling"))
    # named as what they are: the flavour's size, and the blocks profiled, extrapolated
    assert sorted(rows["workload"]) == [
        "llama-13b infer prefill (4 of 40 layers, extrapolated)",
        "llama-70b infer prefill (4 of 80 layers, extrapolated)",
    ]


def test_import_headroom_loads_no_data_libraries():
    """The facade is loaded on first use: processes that need only part of headroom stay light."""
    code = "import headroom, headroom.errors, sys; print(sorted(m for m in ('pandas', 'polars', 'torch') if m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "[]"


def test_analyze_is_one_trace_and_names_the_functions_for_a_directory():
    """analyze() returns one Analysis, always; a directory is refused with the two functions that read one."""
    with pytest.raises(
        UserError,
        match=r"scaling is a directory: headroom\.analyze_all\(\) analyses each trace "
        r"in it, headroom\.analyze_ranks\(\) the ranks of one run together",
    ):
        headroom.analyze(SHIPPED_TRACES / "scaling")


def test_project_takes_a_directory_as_the_command_does(headroom):  # the `headroom` fixture: the CLI
    """headroom.project(DIR) gives the documents `headroom project DIR --json` prints, one per trace."""
    speedup = "category:addressable=1.5"
    p = headroom("project", "traces/scaling", "-s", speedup, "--json")
    assert p.returncode == 0, p.stderr
    printed = [json.loads(line) for line in p.stdout.splitlines()]
    import headroom as api  # the fixture's name shadows the package here

    results = api.project("traces/scaling", speedup=[speedup])  # (the fixture runs in the checkout)
    assert isinstance(results, list) and [type(r).__name__ for r in results] == ["ProjectResult"] * 2
    from headroom.jsonio import dumps

    assert [json.loads(dumps(r)) for r in results] == [{k: v for k, v in d.items() if k != "schema"} for d in printed]
    assert [d["trace"] for d in printed] == [
        "traces/scaling/llama-7b.13b.infer.prefill.4of40-layers.json.gz",
        "traces/scaling/llama-7b.70b.infer.prefill.4of80-layers.json.gz",
    ]


# --- API = CLI: each command's defaults are those of the API function it stands for ---------------------


def _command_defaults() -> dict[str, dict[str, object]]:
    """Every command of the typer app (groups as `bench run`), with each parameter's default."""
    from headroom.cli import app as cli_app

    cli_app.register_commands(None)
    commands = [("", c) for c in cli_app.app.registered_commands]
    commands += [(g.name + " ", c) for g in cli_app.app.registered_groups for c in g.typer_instance.registered_commands]
    out = {}
    for prefix, c in commands:
        name = prefix + cli_app._command_name(c)
        out[name] = {
            p: getattr(v.default, "default", v.default) for p, v in inspect.signature(c.callback).parameters.items()
        }
    return out


def _plain(v: object) -> object:
    """A default as a value: paths as text, enums by value, an unset list option (None) as an empty one."""
    if isinstance(v, Path):
        return str(v)
    if isinstance(v, enum.Enum):
        return v.value
    if isinstance(v, (list, tuple)):
        return tuple(v)
    return v


def _api_defaults(target: object) -> dict[str, object]:
    if dataclasses.is_dataclass(target):
        return {
            f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            for f in dataclasses.fields(target)
        }
    return {
        p: v.default
        for p, v in inspect.signature(target).parameters.items()
        if v.default is not inspect.Parameter.empty
    }


def _api_targets():
    """command -> [(what it calls, {CLI parameter: API parameter, "!name" where the flag is the negation})]."""
    from headroom.fleet import get_engine
    from headroom.fleet.verify import pool_runner

    # The reading flags of every trace-reading command are the fields of one ReadOptions (`read=`).
    read = (
        headroom.ReadOptions,
        {
            "rules": "rules",
            "policy": "policy",
            "whole_trace": "whole_trace",
            "window": "window",
            "lenient": "lenient",
            "no_cache": "!use_cache",
            "graph_source": "graph_source",
        },
    )
    workload = {
        "mode": "mode",
        "phase": "phase",
        "kv_cache": "kv_cache",
        "batch": "batch",
        "seq": "seq",
        "dtype": "dtype",
        "layers": "layers",
        "flavour": "flavour",
        "no_tf32": "!tf32",
        "full_size": "!scale_for_cpu",
    }
    run = {"device": "device", "workload_file": "workload_file"}
    verify = {
        "device": "device",
        "vs_compile": "vs_compile",
        "graphs": "graphs",
        "rounds": "rounds",
        "timeout": "timeout",
        "build_timeout": "build_timeout",
        "seed": "seed",
        "threads": "threads",
        "scale": "scale",
    }
    # --engine/--address: the fleet engine the work is spread over; --resume: the stream a suite run reads back.
    engine = (get_engine, {"engine": "name", "address": "address"})
    suite = [engine, (pool_runner, {"resume": "resume"})]
    return {
        "classify": [read, engine],
        "report": [read, engine],
        "project": [
            (
                headroom.project,
                {
                    "speedup": "speedup",
                    "speedups": "files",
                    "distribution": "distribution",
                    "win_rate": "win_rate",
                    "median": "median",
                    "scenario_select": "select",
                    "strict": "strict",
                    "step_ms": "step_ms",
                    "problems": "problems",
                    "on_rank": "on_ranks",
                },
            ),
            read,
            engine,
        ],
        "targets": [
            (
                headroom.targets,
                {
                    "speedup": "speedup",
                    "scope": "scope",
                    "top": "top",
                    "replay_top": "replay_top",
                    "roofline": "roofline",
                    "peaks": "peaks",
                    "rank_by": "rank_by",
                },
            ),
            read,
            engine,
        ],
        "diff": [(headroom.diff, {"by": "by"}), read],
        "coverage": [(headroom.coverage, {"suite": "suite", "problems": "problems"}), read],
        "plot": [
            (
                headroom.plot,
                {
                    "out": "out",
                    "figure": "figures",
                    "fmt": "formats",
                    "label": "labels",
                    "speedup": "speedup",
                    "speedups": "files",
                    "params": "params",
                    "family": "family",
                    "basis": "basis",
                    "sidecar": "numbers",
                    "problems": "problems",
                },
            ),
            read,
        ],
        "profile": [
            (
                headroom.api.profile,
                {**run, "out": "out", "steps": "steps", "warmup": "warmup", "timed_steps": "timed_steps"},
            ),
            (
                headroom.WorkloadOptions,
                {
                    **workload,
                    "compile_": "compile",
                    "no_module_ranges": "!module_ranges",
                    "nproc": "nproc",
                    "parallel": "parallel",
                    "compile_mode": "compile_mode",
                    "graphs": "graphs",
                },
            ),
        ],
        "extract": [
            (
                headroom.api.extract,
                {**run, "out": "out", "trace": "trace", "window": "window", "no_profile": "!profile"},
            ),
            (headroom.WorkloadOptions, workload),
        ],
        "validate": [
            (
                headroom.api.validate,
                {
                    **run,
                    "out": "out",
                    "from_dir": "from_dir",
                    "rounds": "rounds",
                    "steps_per_round": "steps_per_round",
                    "profile_steps": "profile_steps",
                    "tolerance": "tolerance",
                    "timeout": "timeout",
                    "threads": "threads",
                    "max_rounds": "max_rounds",
                    "target_width": "target_width",
                    "timing_budget": "timing_budget",
                    "timer": "timer",
                    "speedups": "speedups",
                    "problems": "problems",
                    "graphs": "graphs",
                },
            ),
            (headroom.WorkloadOptions, workload),
        ],
        "verify": [(headroom.VerifyOptions, verify), *suite],
        # (--scale unset: each suite problem's own scale, not VerifyOptions' default)
        "bench run": [(headroom.VerifyOptions, {k: v for k, v in verify.items() if k != "scale"}), *suite],
    }


# Commands that stand for no one API function, and why.
NO_API_FUNCTION = {
    "annotate": "writes a copy of a trace (headroom.report.annotate.annotate_trace)",
    "workloads": "lists the registry (headroom.profile.registry.list_workloads)",
    "bench list": "lists the suite's problems",
}


def _drifts(commands: dict[str, dict[str, object]], mapped: dict) -> tuple[list[str], int]:
    """Each mapped parameter whose command default differs from the API's (a `--no-X` flag against the
    negation of the API's `X`), and how many were compared."""
    drifts, compared = [], 0
    for name, targets in mapped.items():
        cli = commands[name]
        for target, params in targets:
            api = _api_defaults(target)
            for cli_name, api_name in params.items():
                negated = api_name.startswith("!")
                api_name = api_name.lstrip("!")
                assert cli_name in cli and api_name in api, (name, cli_name, api_name)
                want = (not api[api_name]) if negated else _plain(api[api_name])
                got = _plain(cli[cli_name])
                if got is None and want == ():  # a repeatable option not given: an empty list
                    got = ()
                if got != want:
                    drifts.append(f"{name} {cli_name}: the command's default {got!r}, the API's {want!r}")
                compared += 1
    return drifts, compared


def test_every_command_has_the_defaults_of_its_api_function():
    """Walk the typer app: each command's parameters that the API function takes default to the same value
    (a `--no-X` flag to the negation of the function's `X`); every command is either mapped or named above."""
    commands = _command_defaults()
    mapped = _api_targets()
    assert set(commands) == set(mapped) | set(NO_API_FUNCTION)
    drifts, compared = _drifts(commands, mapped)
    assert drifts == []
    assert compared >= 158
    # the nine tasks are all there, each with its command
    assert {"profile", "extract", "verify", "validate", "plot", "targets", "project", "diff"} <= set(mapped)


def test_a_drifted_default_fails_the_comparison():
    """The comparison can fail: a facade whose default differs from its command's is reported, by name."""

    def plot(traces, out="out/figures", basis="kernel"):  # two defaults that are not the command's
        """A drifted copy."""

    drifts, compared = _drifts(_command_defaults(), {"plot": [(plot, {"out": "out", "basis": "basis"})]})
    assert compared == 2
    assert drifts == [
        "plot out: the command's default 'out/plots', the API's 'out/figures'",
        "plot basis: the command's default 'wall', the API's 'kernel'",
    ]


def test_replay_top_defaults_to_five_in_both():
    assert inspect.signature(headroom.targets).parameters["replay_top"].default == 5
    assert _command_defaults()["targets"]["replay_top"] == 5


# --- the reading flags: one ReadOptions, with its defaults ----------------------------------------------------

READING_COMMANDS = ("classify", "report", "project", "targets", "diff", "coverage", "plot")


def test_the_reading_flags_are_every_field_of_read_options():
    """Each field of ReadOptions is a flag of every trace-reading command (a new field without one fails)."""
    fields = {f.name for f in dataclasses.fields(headroom.ReadOptions)}
    commands = _command_defaults()
    for command in READING_COMMANDS:
        ((read, flags),) = [t for t in _api_targets()[command] if t[0] is headroom.ReadOptions]
        assert {name.lstrip("!") for name in flags.values()} == fields, command
        assert set(flags) <= set(commands[command]), command
    assert set(inspect.signature(headroom.ReadOptions.from_flags).parameters) == set(
        _api_targets()["classify"][0][1]
    ), "from_flags takes each reading flag"


class _Read(Exception):
    """Stops a command at its Reader, holding the ReadOptions it was handed."""


@pytest.mark.parametrize("command", READING_COMMANDS)
def test_a_command_without_reading_flags_reads_with_read_options_defaults(command, monkeypatch, tmp_path):
    """What the command line hands its Reader, no reading flag given, equals `ReadOptions()` field by field."""
    from typer.testing import CliRunner

    from headroom.cli import app as cli_app
    from headroom.cli.common import Reader

    def stop(reader: Reader) -> None:
        raise _Read(reader.read)

    monkeypatch.setattr(Reader, "__post_init__", stop)
    cli_app.register_commands(None)
    traces = [str(tmp_path / "a.json")] * (2 if command == "diff" else 1)
    result = CliRunner().invoke(cli_app.app, [command, *traces])
    assert isinstance(result.exception, _Read), (command, result.output, result.exception)
    read = result.exception.args[0]
    assert isinstance(read, headroom.ReadOptions)
    for f in dataclasses.fields(headroom.ReadOptions):
        assert getattr(read, f.name) == getattr(headroom.ReadOptions(), f.name), (command, f.name)
