"""headroom/cli/replay.py: a command on unchanged inputs prints its recorded output, byte for byte what it
prints uncached; a changed trace, rules or policy file, or option is run again."""

import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO

COMMANDS = [
    ["classify"],
    ["classify", "--json"],
    ["report"],
    ["report", "--json"],
    ["targets"],
    ["targets", "--json"],
    ["project", "-s", "category:gemm=2"],
    ["project", "--json", "-s", "category:gemm=2"],
]


@pytest.fixture
def setup(tmp_path):
    trace = tmp_path / "t.json.gz"
    trace.write_bytes((REPO / "traces" / "resnet-50.train.json.gz").read_bytes())
    env = dict(os.environ, HEADROOM_CACHE_DIR=str(tmp_path / "cache"), HEADROOM_CACHE_MIN_BYTES="0")
    env.pop("HEADROOM_REPLAY", None)
    return trace, tmp_path / "cache", env


def run(cache, env, *args):
    """(the process, whether it was replayed): the trace cache is emptied first, so a command that ran
    writes its entry again and a replayed one does not."""
    for entry in cache.glob("*"):
        if entry.is_dir() and entry.name != "commands":
            shutil.rmtree(entry)
    p = subprocess.run(
        [sys.executable, "-m", "headroom.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    return p, not list(cache.glob("*/*/header.json"))


@pytest.mark.parametrize("words", COMMANDS, ids=" ".join)
def test_the_replayed_output_is_the_uncached_output(setup, words):
    trace, cache, env = setup
    fresh, _ = run(cache, env, *words, "--no-cache", trace)
    first, replayed_first = run(cache, env, *words, trace)
    second, replayed = run(cache, env, *words, trace)
    assert not replayed_first and replayed
    assert (second.stdout, second.stderr) == (first.stdout, first.stderr) == (fresh.stdout, fresh.stderr)
    assert len(second.stdout) > 200


def test_a_changed_input_runs_again(setup, tmp_path):
    trace, cache, env = setup
    rules, policy = tmp_path / "rules.toml", tmp_path / "policy.toml"
    rules.write_text('[[rule]]\ncategory = "my_gemm"\nkind = "kernel"\nkernel = "^nothing_matches_this$"\n')
    policy.write_text("[addressable]\nmy_gemm = true\n")
    words = ["classify", "--json", "--rules", rules, "--policy", policy, trace]
    assert not run(cache, env, *words)[1] and run(cache, env, *words)[1]

    def runs_again_and_matches(*args):
        p, replayed = run(cache, env, *args)
        assert not replayed
        fresh, _ = run(cache, env, *args[:-1], "--no-cache", args[-1])
        assert p.stdout == fresh.stdout and p.stderr == fresh.stderr
        assert run(cache, env, *args)[1]  # recorded anew
        return p.stdout

    before = run(cache, env, *words)[0].stdout
    rules.write_text('[[rule]]\ncategory = "my_gemm"\nkind = "kernel"\nkernel = "conv"\n')
    assert runs_again_and_matches(*words) != before
    policy.write_text("[addressable]\nmy_gemm = false\n")
    runs_again_and_matches(*words)
    runs_again_and_matches("classify", "--json", "--whole-trace", "--rules", rules, "--policy", policy, trace)
    os.utime(trace, ns=(1, 1))  # the same bytes, another modification time: read again
    runs_again_and_matches(*words)
    env["HEADROOM_REPLAY"] = "off"
    assert not run(cache, env, *words)[1]


def test_a_replay_imports_no_heavy_module(setup):
    trace, cache, env = setup
    words = ["classify", "--json", str(trace)]
    assert not run(cache, env, *words)[1]
    code = f"""if True:
        import sys
        from headroom.cli import replay
        done = replay.replay({words!r})
        heavy = sorted(m for m in ("numpy", "pandas", "polars", "typer", "rich") if m in sys.modules)
        print(done, heavy, file=sys.stderr)
    """
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    assert p.stderr.strip().splitlines()[-1] == "True []", p.stderr
    assert p.stdout.startswith('{"schema": "headroom.classify/')
