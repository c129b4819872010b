"""The Python API in one place: what `import headroom` offers notebooks and scripts, task by task.

    import headroom
    r = headroom.profile("llama-7b", headroom.WorkloadOptions(flavour="tiny"), device="cpu")  # a ProfileResult
    a = headroom.analyze("traces/dlrm.train.json.gz")                  # an Analysis; .to_frame(): per category
    headroom.targets(a).to_frame()                                     # ops and modules by end-to-end gain
    headroom.project(a, speedup=["category:embedding=1.552"]).to_frame()   # Amdahl and replay, per scenario
    headroom.diff("before.json.gz", "after.json.gz", by="module")     # two runs compared
    headroom.extract("llama-7b", "LlamaRMSNorm")                       # a KernelBench problem, real shapes
    headroom.verify("problem.py", "candidate.py")                      # a VerifyResult: verdict, speedup
    headroom.validate("llama-7b", ["LlamaRMSNorm=my_rmsnorm.py"])      # the swap measured end to end
    headroom.plot(["traces/"], out="out/plots")                        # the figures
    headroom.report_html(["traces/"], "report.html")                   # the `headroom report --html` page

Each function calls what its command calls, with the command's defaults (tests/test_api.py checks them);
how traces are read is one `ReadOptions` (`read=`), as the commands' --rules, --policy, --whole-trace,
--window, --lenient and --no-cache flags. Modules, by concept: `traces` (reading and comparing traces),
`projections` (speedups to end-to-end answers), `reports` (the HTML page, the figures), `runs` (profile,
extract, verify, validate: torch imported when one runs). docs/api.md is the reference.
"""

from headroom.api.projections import predict, project, project_ranks, targets
from headroom.api.reports import plot, report_html
from headroom.api.runs import WorkloadOptions, extract, profile, validate, verify
from headroom.api.traces import analyze, analyze_all, analyze_ranks, coverage, diff, diff_html, read_inputs, summary
from headroom.errors import UserError
from headroom.extract.result import ExtractResult
from headroom.profile.launch import RanksProfileResult
from headroom.profile.run import ProfileResult
from headroom.projection.coverage import Coverage
from headroom.projection.project import Prediction, ProjectResult
from headroom.projection.sync_projection import RanksProjection
from headroom.projection.targets import Targets
from headroom.report.diff import Diff
from headroom.report.figures import Plots
from headroom.trace.analysis import Analysis
from headroom.trace.load import find_trace_files
from headroom.trace.rank_set import RankSet
from headroom.trace.read_options import ReadOptions
from headroom.validate.result import ValidateResult
from headroom.verify.options import VerifyOptions
from headroom.verify.results import VerifyResult

# The nine tasks, each as its command (docs/api.md has one section per task; report_html and the others
# beside them).
TASKS = ("profile", "analyze", "targets", "project", "diff", "extract", "verify", "validate", "plot")

__all__ = [
    "Analysis",
    "Coverage",
    "Diff",
    "ExtractResult",
    "Plots",
    "Prediction",
    "ProfileResult",
    "ProjectResult",
    "RankSet",
    "RanksProfileResult",
    "RanksProjection",
    "ReadOptions",
    "Targets",
    "UserError",
    "ValidateResult",
    "VerifyOptions",
    "VerifyResult",
    "WorkloadOptions",
    "analyze",
    "analyze_all",
    "analyze_ranks",
    "coverage",
    "diff",
    "diff_html",
    "extract",
    "find_trace_files",
    "plot",
    "predict",
    "profile",
    "project",
    "project_ranks",
    "read_inputs",
    "report_html",
    "summary",
    "targets",
    "validate",
    "verify",
]
