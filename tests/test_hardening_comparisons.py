"""Hardening, class "comparisons that should be refused" (issue 46): `diff` of a directory of ranks against
a single trace (or against a directory of another number of ranks) printed a speedup of sums over different
things ("speedup 11.2250x", exit 0); it is refused in one line.

Generated: pairs of one directory of ranks and one single trace (either side, any grouping)."""

from __future__ import annotations

from hardening_support import HTA, SMALL, TRACES, one_error_line, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.ranks_synthetic import write_pair

SINGLES = (SMALL, TRACES / "dlrm.train.json.gz", HTA / "base__base.json.gz")


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    single=st.sampled_from(SINGLES),
    ranks_first=st.booleans(),
    rank_file=st.booleans(),
    by=st.sampled_from(["category", "op", "kernel", "module"]),
)
def test_a_directory_of_ranks_against_a_single_trace_is_refused(tmp_path_factory, single, ranks_first, rank_file, by):
    d = tmp_path_factory.mktemp("r") / "ranks"
    d.mkdir()
    write_pair(d)
    other = d / "rank-0.json.gz" if rank_file else single  # one rank of the same run is a single trace too
    pair = (d, other) if ranks_first else (other, d)
    code, out, err = run("diff", *pair, "--by", by, "--json")
    assert code == 2 and one_error_line(err) and "ranks" in err.splitlines()[-1], err
    assert out == ""
