"""The command line as a new user and an attacker meet it: one line and exit 2 for every
bad input, results on stdout and everything else on stderr in one style, strict JSON in µs with a
schema, per-step milliseconds on screen, names checked with a did-you-mean, step-less traces."""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO, SHIPPED_TRACES, TraceBuilder

DLRM = SHIPPED_TRACES / "dlrm.train.json.gz"


def subprocess_headroom(*args, timeout=120, **kw) -> subprocess.CompletedProcess:
    """The real command, in a process of its own (for signals, help rendering, imports)."""
    return subprocess.run(
        [sys.executable, "-m", "headroom.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=timeout,
        **kw,
    )


def one_error_line(p: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit 2, nothing on stdout, exactly one line on stderr in the one style, naming each needle."""
    assert p.returncode == 2, (p.returncode, p.stdout[-500:], p.stderr[-2000:])
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("headroom: error: "), p.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def strict_json(text: str):
    """Parse as a strict reader would: NaN/Infinity are not JSON."""

    def refuse(name):
        raise AssertionError(f"{name} in JSON output")

    return json.loads(text, parse_constant=refuse)


# --- usage, help, version ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args,needle",
    [
        (("classify",), "Missing argument"),
        (("bogus",), "No such command 'bogus'"),
        (("plot", DLRM, "--basis", "foo"), "'foo' is not one of"),
        (("targets", DLRM, "--by", "banana"), "'banana' is not one of"),
        (("profile", "llama-7b", "--timed-steps", "0"), "--timed-steps"),  # used to write NaN into the trace
        (("report", "--rules"), "requires an argument"),
        (("verify", "--suite", REPO / "docs", "--candidates", REPO / "docs"), "no problem files"),  # exited 0, silent
    ],
)
def test_usage_errors_are_one_line(args, needle, headroom):
    one_error_line(headroom(*args), needle)


def test_version_and_choices_in_help():
    p = subprocess_headroom("--version")
    assert p.returncode == 0 and re.fullmatch(r"headroom \d+\.\d+\.\d+\n", p.stdout)
    wide = {**os.environ, "COLUMNS": "200"}
    plot = subprocess_headroom("plot", "--help", env=wide).stdout
    # choices within <...> (typer 0.29 shows a repeatable option's as <list[png|svg|pdf]>, 0.28 as <png|svg|pdf>)
    for choices in ("addressable|projection|scaling", "png|svg|pdf", "wall|kernel"):
        assert re.search(rf"<(list\[)?{re.escape(choices)}\]?>", plot), choices
    assert "<list[Path]>" not in plot and "<list[str]>" not in plot
    assert "<bool>" not in plot
    prof = subprocess_headroom("profile", "--help", env=wide).stdout
    assert "<train|infer>" in prof and "<bf16|fp16|fp32>" in prof and "<auto|cuda|cpu>" in prof
    assert "--install-completion" in subprocess_headroom("--help").stdout


def test_the_command_map_names_every_command_of_each_module_in_the_help_order():
    """COMMAND_MODULES (which module a command line imports) against what each module registers, in a
    fresh interpreter: a command line naming one command builds only its module's, the help lists all
    in the map's order, and a typo still gets click's did-you-mean over every command."""
    code = """if True:
        import importlib, json, sys, typer
        from headroom.cli import app as A
        A.register_commands(["targets", "trace.json"])
        only = [A._command_name(c) for c in A.app.registered_commands]
        loaded = sorted(m for m in sys.modules if m.startswith("headroom.cli.") and m.count(".") == 2)
        per_module = {}
        for name in dict.fromkeys(A.COMMAND_MODULES.values()):
            t = typer.Typer()
            importlib.import_module(f"headroom.cli.{name}").register(t)
            per_module[name] = [A._command_name(c) for c in t.registered_commands] + [g.name for g in t.registered_groups]
        A.register_commands(["--help"])
        every = [A._command_name(c) for c in A.app.registered_commands] + [g.name for g in A.app.registered_groups]
        print(json.dumps([per_module, only, loaded, every]))
    """
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    per_module, only, loaded, every = json.loads(p.stdout)
    from headroom.cli.app import COMMAND_MODULES

    assert {c: m for m, cs in per_module.items() for c in cs} == COMMAND_MODULES
    assert only == ["project", "targets", "plot"]
    assert "headroom.cli.verify" not in loaded and "headroom.cli.profile" not in loaded
    assert every == list(COMMAND_MODULES)
    typo = subprocess_headroom("tragets", "x.json")
    assert typo.returncode == 2 and "Did you mean 'targets'" in typo.stderr, typo.stderr


@pytest.mark.parametrize(
    "words",
    [["targets"], ["project", "--speedup", "category:gemm=2"], ["classify", "--json"], ["classify"], ["report"]],
)
def test_a_command_on_a_cached_trace_imports_only_what_it_uses(tmp_path, words):
    """A command on a cached trace (the second command <= 1 s) is mostly its imports. It imports
    neither polars (the loader's), pydantic (typer 0.29 builds a pydantic adapter per parameter: typer is held
    below 0.29), filelock (only a writer of the cache locks) nor the modules of a directory of ranks; classify
    and report print the trace's kept summary and import neither numpy nor pandas."""
    env = {**os.environ, "HEADROOM_CACHE_DIR": str(tmp_path / "cache"), "HEADROOM_CACHE_MIN_BYTES": "0"}
    env["HEADROOM_REPLAY"] = "off"
    trace = SHIPPED_TRACES / "resnet-50.train.json.gz"
    assert subprocess_headroom("targets", trace, env=env).returncode == 0  # fills the cache
    modules = tmp_path / "modules.json"
    code = f"""if True:
        import json, sys
        from headroom.cli.app import dispatch
        code = dispatch({[*words, str(trace)]!r})
        json.dump([code, sorted(sys.modules)], open({str(modules)!r}, "w"))
    """
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    code, loaded = json.loads(modules.read_text())
    assert code == 0 and p.stdout.strip(), p.stderr[-2000:]
    if words[0] in ("classify", "report"):
        assert "headroom.report.summary" in loaded and "pandas" not in loaded and "numpy" not in loaded
    else:
        assert "headroom.trace.cache" in loaded and "pandas" in loaded  # it did read the cached trace
    # A package's submodules: the loader names polars to lazy_loader, which puts an empty module in its place.
    unwanted = [
        m
        for m in loaded
        if m.split(".")[0] in ("polars", "pydantic", "pydantic_core", "filelock")
        and "." in m
        or m
        in (
            "headroom.trace.rank_set",
            "headroom.projection.sync_projection",
            "headroom.projection.sync_targets",
            "headroom.report.rank_tables",
            "headroom.cli.trace_inputs",
            "headroom.trace.comm",
        )
    ]
    assert unwanted == []


@pytest.mark.parametrize("args, code", [(["--version"], 0), (["classify", "no-such.json"], 2)])
def test_the_quick_exit_keeps_what_an_exit_does(tmp_path, args, code):
    """`main` ends with os._exit (no interpreter teardown), after atexit handlers and flushed output;
    with another thread still running it exits the ordinary way, which waits for that thread."""
    code_text = f"""if True:
        import atexit, pathlib, sys, threading, time
        from headroom.cli import main
        atexit.register(lambda: pathlib.Path({str(tmp_path / "atexit")!r}).write_text("ran"))
        if sys.argv[1] == "thread":
            threading.Thread(target=lambda: (time.sleep(0.5),
                             pathlib.Path({str(tmp_path / "thread")!r}).write_text("done"))).start()
        sys.stdout.write("unflushed ")
        main({[str(a) for a in args]!r})
    """
    for mode in ("plain", "thread"):
        p = subprocess.run(
            [sys.executable, "-c", code_text, mode], capture_output=True, text=True, cwd=REPO, timeout=120
        )
        assert p.returncode == code, p.stderr
        assert p.stdout.startswith("unflushed ") and (code != 0 or "headroom " in p.stdout)
        assert (tmp_path / "atexit").read_text() == "ran"
        assert (code != 2) or p.stderr.count("\n") == 1
    assert (tmp_path / "thread").read_text() == "done"


# --- rules, policies and selectors: names checked --------------------------------------------------


def test_rules_and_policy_files_of_any_kind(tmp_path, headroom):
    one_error_line(headroom("classify", "--rules", tmp_path, DLRM), "is a directory")
    latin = tmp_path / "p.toml"
    latin.write_bytes(b"[addressable]\n# r\xe9gle\ngemm = true\n")
    one_error_line(headroom("classify", "--policy", latin, DLRM), str(latin), "not UTF-8")
    banana = tmp_path / "banana.toml"
    banana.write_text("[addressable]\nbanana = true\n")
    one_error_line(headroom("classify", "--policy", banana, DLRM), "unknown category 'banana'")
    typo = tmp_path / "typo.toml"  # the case: one letter made every GEMM addressable (33% -> 94%)
    typo.write_text('[[rule]]\ncategory = "gemn"\nkernel = "gemm|nvjet|cutlass"\n')
    one_error_line(headroom("classify", "--rules", typo, DLRM), "unknown category 'gemn' (did you mean 'gemm'?)")


def test_policy_names_are_case_insensitive(tmp_path, headroom):
    # `GEMM = true` used to do nothing (the key is "gemm"): dlrm stayed 63.4% addressable.
    upper = tmp_path / "p.toml"
    upper.write_text("[addressable]\nGEMM = true\n")
    base = strict_json(headroom("classify", "--json", DLRM).stdout)
    p = headroom("classify", "--json", "--policy", upper, DLRM)
    d = strict_json(p.stdout)
    gemm = next(c for c in base["categories"] if c["name"] == "gemm")
    assert d["addressable_fraction"] == pytest.approx(base["addressable_fraction"] + gemm["fraction"])
    assert round(100 * d["addressable_fraction"], 1) == 99.9


def test_selector_typos_are_errors_with_did_you_mean(headroom):
    # used to warn, print a table of zeros and exit 0
    one_error_line(
        headroom("project", DLRM, "-s", "category:embeding=2"),
        "unknown category 'embeding' (did you mean 'embedding'?)",
    )
    one_error_line(headroom("project", DLRM, "-s", "phase:backwrd=2"), "did you mean 'backward'?")
    p = headroom("project", "--json", DLRM, "-s", "category:EMBEDDING=1.552")
    d = strict_json(p.stdout)
    assert p.returncode == 0 and d["entries"][0]["selector"] == "category:embedding"
    assert d["entries"][0]["kernels"] == 69


def test_factors_whose_projection_would_overflow_are_refused(headroom):
    # 1e-308 passed validation and gave inf/NaN projections
    one_error_line(headroom("project", DLRM, "-s", "category:embedding=1e-308"), "would overflow")


def test_a_catastrophic_regex_cannot_hang_a_run(tmp_path, builder):
    # `(.*a){N+1}` backtracks in Python's re on a name with N a's and a tail: 6 s for one such name at
    # N = 24 on the 2-core machine, twice that for each a more (these: 28, over a minute each); RE2 is
    # linear. The timeout is the check, not a wall-clock bound that a loaded machine could break.
    builder.step(1, 0, 100)
    for k, tail in enumerate("bcd"):
        builder.kernel("a" * 28 + tail * 48, launch_ts=1 + k, ts=2 + 10 * k, dur=10)
    builder.kernel("gemm_" + "a" * 29, launch_ts=5, ts=40, dur=10)
    trace = builder.write(tmp_path / "t.json")
    rules = tmp_path / "r.toml"
    rules.write_text('[[rule]]\ncategory = "gemm"\nkernel = "(.*a){29}"\n')
    try:
        p = subprocess_headroom("classify", "--json", "--rules", rules, trace, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("a rule's regex hung the run")
    assert p.returncode == 0, p.stderr
    cats = {c["name"]: c["count"] for c in strict_json(p.stdout)["categories"]}
    assert cats == {"other": 3, "gemm": 1}


# --- JSON: strict, µs, schema -----------------------------------------------------------------------


def test_json_never_holds_nan_or_infinity(tmp_path, headroom):
    # Two 1.5e308 µs kernels sum to Infinity, which json.dumps writes as `Infinity` (not JSON).
    b = TraceBuilder()
    b.step(1, 0, 100)
    b.kernel("k1", launch_ts=1, ts=2, dur=1.5e308)
    b.kernel("k2", launch_ts=3, ts=4, dur=1.5e308)
    p = headroom("classify", "--json", b.write(tmp_path / "inf.json"))
    # LOADER (branch `scale`): validation may refuse this trace (dur beyond the trace's span) with one
    # line and exit 2; either way no command prints a non-JSON number.
    if p.returncode == 2:
        one_error_line(p, "inf.json")
    else:
        assert p.returncode == 0, p.stderr
        assert strict_json(p.stdout)["total_us"] is None
    # A zero-time projection has an infinite end-to-end speedup only when everything is selected.
    q = headroom("project", "--json", DLRM, "-s", "category:all=2")
    proj = strict_json(q.stdout)
    zero = next(x for x in proj["projections"] if x["scenario"] == "zero_time" and x["method"] == "amdahl")
    assert q.returncode == 0 and zero["factor"] is None


def test_every_json_document_has_a_schema_and_report_is_in_microseconds(headroom):
    docs = {
        "classify": strict_json(headroom("classify", "--json", DLRM).stdout),
        "report": strict_json(headroom("report", "--json", DLRM).stdout),
        "project": strict_json(headroom("project", "--json", DLRM, "-s", "category:embedding=1.5").stdout),
        "targets": strict_json(headroom("targets", "--json", "--replay-top", "0", DLRM).stdout),
        "workloads": strict_json(headroom("workloads", "--json").stdout),
    }
    for name, d in docs.items():
        assert list(d)[0] == "schema" and d["schema"] == f"headroom.{name}/1"
    # report --json used to be a bare array in milliseconds (19.814 for this trace)
    row = docs["report"]["traces"][0]
    assert row["step_us"] == pytest.approx(docs["classify"]["step_us"]) and round(row["step_us"]) == 19814
    assert "step_ms" not in row and docs["report"]["failed"] == []
    cli_md = (REPO / "docs" / "cli.md").read_text()
    for name in (*docs, "profile"):
        assert f"`headroom.{name}/1`" in cli_md


# --- stderr, one style; per-step on screen ------------------------------------------------------------


def test_warnings_go_to_stderr_in_one_style(tmp_path, headroom):
    p = headroom("project", DLRM, "-s", "category:embedding=1.5", "-s", "op:aten::no_such_op=2")
    assert p.returncode == 0
    assert "warning" not in p.stdout
    # The trace's CUDA sync records hold 3 stream waits the replay cannot place: said once, in the same style.
    assert p.stderr == (
        f"headroom: warning: {DLRM}: op:aten::no_such_op=2 (command line) matches no kernel "
        f"in this trace\n"
        f"headroom: warning: {DLRM}: 3 stream wait(s) could not be placed; the replay holds their "
        f"consumers' measured lag instead\n"
    )
    q = headroom("plot", DLRM, "--out", tmp_path, "--format", "png", "-s", "op:aten::no_such_op=2")
    assert q.returncode == 0 and "headroom:" not in q.stdout
    assert {ln.split(": ")[1] for ln in q.stderr.splitlines()} == {"warning"}
    assert q.stdout.split() == [str(tmp_path / f"{f}.png") for f in ("addressable", "projection")]


def test_screens_show_milliseconds_per_step_and_label_totals(headroom):
    # targets printed 3-step totals beside per-step times without saying so
    t = headroom("targets", "--replay-top", "0", DLRM).stdout
    assert "measured 19.814 ms/step over 3 step(s)" in t and "ms/step" in t
    row = next(ln for ln in t.splitlines() if ln.lstrip().startswith("aten::_index_put_impl_"))
    assert " 5.458 " in row  # 16,374.4 µs over 3 steps (the 3-step total was 16.374)
    p = headroom("project", DLRM, "-s", "category:embedding=1.552").stdout
    assert "measured: 19.814 ms/step (3 step(s), 59.441 ms in total)" in p
    c = headroom("classify", DLRM).stdout
    assert "per step: 19.81 ms wall" in c and "total wall 59.44 ms" in c and "ms/step" in c


def test_report_reads_several_paths_names_a_bad_one_and_exits_2_at_the_end(tmp_path, headroom):
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [')
    p = headroom("report", "--json", DLRM, bad, tmp_path / "missing.json")
    assert p.returncode == 2
    d = strict_json(p.stdout)
    assert [r["workload"] for r in d["traces"]] == ["dlrm train"]
    assert d["failed"] == [str(bad), str(tmp_path / "missing.json")]
    errors = p.stderr.strip().splitlines()
    assert len(errors) == 2 and str(bad) in errors[0] and "missing.json: no such file" in errors[1]


def test_layers_and_flavour_runs_are_labelled_as_such(headroom):
    # 13B/70B runs showed up as "llama-7b ... 4of40-layers"
    d = strict_json(headroom("report", "--json", SHIPPED_TRACES / "scaling").stdout)
    rows = {r["workload"]: r for r in d["traces"]}
    assert set(rows) == {
        "llama-13b infer prefill (4 of 40 layers, extrapolated)",
        "llama-70b infer prefill (4 of 80 layers, extrapolated)",
    }
    r13 = rows["llama-13b infer prefill (4 of 40 layers, extrapolated)"]
    assert r13["extrapolated"] and r13["layers"] == "4 of 40" and round(100 * r13["addressable_fraction"], 1) == 32.5
    c = headroom("classify", SHIPPED_TRACES / "scaling" / "llama-7b.13b.infer.prefill.4of40-layers.json.gz").stdout
    assert "llama-13b infer prefill (4 of 40 layers): the numbers below are for the 4 profiled blocks" in c


def test_long_template_kernel_names_are_shortened_by_structure(headroom):
    from headroom.report.render import short_name

    name = (
        "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
        "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, "
        "at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, "
        "std::array<char*, 3ul>)"
    )
    # it used to be cut mid-string at 120 characters
    assert short_name(name, 72) == "…::vectorized_elementwise_kernel<4, BinaryFunctor<…>, array<…> >(…)"
    assert short_name("nvjet_tst_64x8_64x16_4x1_v_bz_TNN", 72) == "nvjet_tst_64x8_64x16_4x1_v_bz_TNN"
    out = headroom("classify", "--all", SHIPPED_TRACES / "llama-7b.infer.prefill.json.gz").stdout
    assert max(len(ln) for ln in out.splitlines()) <= 200
    # JSON keeps the whole name
    d = strict_json(headroom("classify", "--json", "--all", SHIPPED_TRACES / "llama-7b.infer.prefill.json.gz").stdout)
    assert max(len(k["name"]) for k in d["kernels"]) > 200


# --- traces as people capture them --------------------------------------------------------------------


@pytest.fixture(scope="module")
def plain_torch_trace(tmp_path_factory):
    """What most people capture: `with torch.profiler.profile():` around some work, no schedule, no steps."""
    torch = pytest.importorskip("torch")
    path = tmp_path_factory.mktemp("plain") / "plain.json"
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.LayerNorm(64), torch.nn.ReLU())
    x = torch.randn(32, 64)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            model(x).sum()
    prof.export_chrome_trace(str(path))
    return path


def test_step_less_traces_work_in_every_command(plain_torch_trace, tmp_path, headroom):
    note = "no ProfilerStep ranges: analysing the whole trace"
    c = headroom("classify", "--json", plain_torch_trace)
    assert c.returncode == 0 and note in c.stderr
    d = strict_json(c.stdout)
    assert d["basis"] == "whole trace" and d["mode"] == "cpu-ops" and d["notes"][0].startswith(note)
    cats = {x["name"] for x in d["categories"]}
    assert {"gemm", "normalization"} <= cats
    r = headroom("report", plain_torch_trace)  # report could not read these traces at all
    assert r.returncode == 0 and note in r.stderr and "plain" in r.stdout
    for args in (
        ("project", plain_torch_trace, "-s", "category:normalization=2"),
        ("targets", plain_torch_trace, "--replay-top", "0"),
        ("plot", plain_torch_trace, "--figure", "addressable", "--format", "png", "--out", tmp_path),
    ):
        p = headroom(*args)
        assert p.returncode == 0 and note in p.stderr, (args, p.stderr)


def test_window_selects_steps_by_an_annotation(tmp_path, headroom):
    b = TraceBuilder()  # vLLM-style: one `execute_model` range per engine step, no ProfilerStep
    for t0 in (0, 1000, 2000):
        b.cpu("execute_model", t0, 400, cat="user_annotation")
        b.kernel("sm90_xmma_gemm_bf16", launch_ts=t0 + 10, ts=t0 + 20, dur=300)
        b.kernel("vectorized_elementwise_kernel", launch_ts=t0 + 500, ts=t0 + 510, dur=100)  # between steps
    trace = b.write(tmp_path / "vllm.json.gz")
    p = headroom("report", "--json", "--window", "execute_model", trace)
    assert p.returncode == 0 and p.stderr == ""
    row = strict_json(p.stdout)["traces"][0]
    assert row["num_steps"] == 3 and row["basis"] == "3 range(s) matching 'execute_model'"
    assert row["gpu_us_per_step"] == 300 and row["gemm_attention_conv_fraction"] == 1.0
    whole = strict_json(headroom("report", "--json", "--whole-trace", trace).stdout)["traces"][0]
    assert whole["basis"] == "whole trace" and whole["gpu_us_per_step"] == 1200


# --- outputs: OS errors, Ctrl-C ----------------------------------------------------------------------------


def test_os_errors_on_output_paths_are_one_line(tmp_path, headroom, monkeypatch):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    one_error_line(headroom("annotate", DLRM, "-o", tmp_path), "is a directory")
    one_error_line(headroom("annotate", DLRM, "-o", a_file / "x.json"), "file")
    one_error_line(headroom("annotate", DLRM, "-o", "/proc/headroom-test.json"), "/proc")  # a read-only place
    one_error_line(headroom("plot", DLRM, "--out", a_file), "exists and is not a directory")
    one_error_line(
        headroom("profile", "resnet-50", "--device", "cpu", "--out", a_file), "exists and is not a directory"
    )
    problem = REPO / "tests" / "cheaters" / "problems" / "clamp_unit.py"
    cand = REPO / "tests" / "cheaters" / "candidates" / "honest_clamp.py"
    from headroom import verify

    def verified(*a, **k):
        raise AssertionError("the verification ran before the output path was refused")

    monkeypatch.setattr(verify, "verify_candidate", verified)  # refused before it runs, not after
    one_error_line(headroom("verify", problem, cand, "--out", a_file / "r.json"), "file: exists and is not a directory")
    assert not list(tmp_path.glob(".*tmp")) and a_file.read_text() == "x"


@pytest.fixture(scope="module")
def interpreter_start_s() -> float:
    """How long this machine's Python takes to start (site, .pth files), before any headroom code runs:
    an interrupt inside that is Python's own ("Fatal Python error: init_import_site"), not ours."""
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.monotonic() - t0


# Delays after the interpreter started: inside the imports (typer, pandas, polars), reading the trace,
# writing the output.
@pytest.mark.parametrize("delay", [0.02, 0.3, 0.8, 1.5])
def test_ctrl_c_at_any_moment_exits_130_and_leaves_nothing_half_written(tmp_path, delay, interpreter_start_s):
    out = tmp_path / "a.json.gz"
    p = subprocess.Popen(
        [sys.executable, "-m", "headroom.cli", "annotate", str(DLRM), "-o", str(out)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(2 * interpreter_start_s + delay)
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=60)
    if p.returncode == 0:  # it finished first: the output is whole
        assert json.loads(gzip.decompress(out.read_bytes()))["traceEvents"]
        return
    assert p.returncode == 130, (p.returncode, stderr)
    assert "Traceback" not in stderr and stderr.strip().splitlines()[-1] == "headroom: interrupted"
    if out.exists():  # interrupted after the output was renamed into place: it is whole, nothing else is left
        assert json.loads(gzip.decompress(out.read_bytes()))["traceEvents"] and os.listdir(tmp_path) == [out.name]
        return
    assert os.listdir(tmp_path) == []


# --- streams, links, pipes that close, candidates -----------------------------------------------------


@pytest.mark.parametrize("gzipped", [False, True])
def test_a_trace_through_a_pipe_is_read_and_named_as_given(gzipped, tmp_path):
    """`headroom classify <(zcat t.json.gz)` said "empty file" (the loader opened the pipe twice)."""
    src = DLRM if gzipped else tmp_path / "dlrm.json"
    if not gzipped:
        src.write_bytes(gzip.decompress(DLRM.read_bytes()))
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    writer = subprocess.Popen(["sh", "-c", f"cat '{src}' > '{fifo}'"])
    try:
        p = subprocess_headroom("report", "--json", fifo, timeout=60)
    finally:
        writer.wait(timeout=30)
    assert p.returncode == 0, p.stderr
    row = strict_json(p.stdout)["traces"][0]
    assert row["trace"] == str(fifo) and row["num_steps"] == 3
    assert row["step_us"] == pytest.approx(19814, abs=1)


def test_a_broken_symlink_among_traces_is_named(tmp_path, headroom):
    d = tmp_path / "ranks"
    d.mkdir()
    (d / "rank-0.json.gz").write_bytes(DLRM.read_bytes())
    (d / "rank-1.json.gz").symlink_to(tmp_path / "gone.json.gz")
    p = headroom("report", "--json", d)
    assert p.returncode == 2
    assert f"headroom: error: {d}/rank-1.json.gz: a broken symbolic link (to {tmp_path}/gone.json.gz)" in p.stderr
    assert len(strict_json(p.stdout)["traces"]) == 1  # the other trace still reported


@pytest.mark.parametrize("args", [("targets", DLRM, "--top", "0"), ("classify", DLRM)])
def test_a_reader_that_leaves_gives_exit_141(args):
    """`headroom targets T --top 0 | head -1` exited 1 without a word (rich's own broken-pipe exit); here the
    reader leaves before the first line (`| true`), so that no output fits the pipe before it closes."""
    cmd = " ".join(map(str, [sys.executable, "-m", "headroom.cli", *args]))
    p = subprocess.run(
        ["bash", "-c", f"{cmd} 2>/dev/null | true; echo ${{PIPESTATUS[0]}}"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert p.stdout.strip() == "141"


@pytest.mark.parametrize("make,needle", [(None, "no such directory"), ("empty", "no candidate for any of the 12")])
def test_bench_run_refuses_candidates_it_cannot_use(tmp_path, headroom, make, needle):
    d = tmp_path / "c"
    if make:
        d.mkdir()
    one_error_line(headroom("bench", "run", "--candidates", d), f"--candidates {d}: {needle}")


def test_library_warnings_come_in_the_one_style(capfd):
    import warnings

    from headroom.cli.output import library_warnings_in_one_style

    saved = warnings.showwarning
    try:
        library_warnings_in_one_style()
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("The profiler is\n  slow", UserWarning, stacklevel=1)  # two lines in Python's style
        assert capfd.readouterr().err == "headroom: warning: UserWarning: The profiler is slow\n"
    finally:
        warnings.showwarning = saved
