import pytest

from headroom.errors import UserError
from headroom.trace.analysis import analyze
from headroom.trace.classify import classify_one, load_classifier, load_policy, load_rules
from tests.conftest import hta_trace

RULES = load_rules()


_AMBIGUOUS = [
    ("nvjet_tst_192x192_64x4_2x1_v_bz_coopA_NNT", "aten::mm", "gemm"),
    ("nvjet_tst_192x192_64x4_2x1_v_bz_coopA_NNT", "aten::cudnn_convolution", "conv"),
    (
        "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>(...)",
        "aten::embedding",
        "embedding",
    ),
    (
        "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>(...)",
        "aten::index_select",
        "indexing",
    ),
    (
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t> >(Flash_fwd_params)",
        "aten::_flash_attention_forward",
        "attention",
    ),
    (
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        "record_param_comms",
        "communication",
    ),
    ("Cijk_Alik_Bljk_SB_MT64x16x32_MI16x16x1", "aten::addmm", "gemm"),
    ("triton_poi_fused_add_cos_sin_0", "triton_poi_fused_add_cos_sin_0", "fused"),
    ("triton_tem_fused_mm_0", "aten::mm", "gemm"),
    (
        "triton_poi_fused__scaled_dot_product_cudnn_attention__to_copy__unsafe_view_add_cos_0",
        "triton_poi_fused__scaled_dot_product_cudnn_attention__to_copy__unsafe_view_add_cos_0",
        "fused",
    ),
    (
        "triton_red_fused__to_copy_add_embedding_mean_mul_pow_rsqrt_0",
        "triton_red_fused__to_copy_add_embedding_mean_mul_pow_rsqrt_0",
        "fused",
    ),
    (
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, float, float, float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(...)",
        "aten::_softmax",
        "softmax",
    ),
    (
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(...)",
        "aten::native_layer_norm",
        "normalization",
    ),
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, ...)",
        "aten::fill_",
        "elementwise",
    ),
    (
        "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(...)",
        "aten::copy_",
        "copy",
    ),
    (
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<...FusedAdamMathFunctor...>",
        "aten::_fused_adam_",
        "optimizer",
    ),
    ("void cub::DeviceRadixSortOnesweepKernel<...>", "aten::sort", "sort"),
    (
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float> > >(...)",
        "aten::mean",
        "reduction",
    ),
    (
        "fbgemm_gpu::split_embedding_codegen_forward_unweighted_kernel<...>",
        "fbgemm::split_embedding_codegen_lookup_sgd_function",
        "embedding",
    ),
    (
        "void cub::DeviceRadixSortOnesweepKernel<...>",
        "torch::autograd::CppNode<SplitLookupFunction_sgd_Op>",
        "embedding",
    ),
    ("some_brand_new_kernel_xyz", "aten::foo", "other"),
]


@pytest.mark.parametrize("name,op,category", _AMBIGUOUS)
def test_rule_table_on_ambiguous_and_plain_names(name, op, category):
    assert classify_one(RULES, "kernel", name, op, op) == category


@pytest.mark.parametrize(
    "op,category",
    [
        ("aten::addmm", "gemm"),
        ("aten::linear", "gemm"),
        ("aten::scaled_dot_product_attention", "attention"),
        ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"),
        ("aten::mkldnn_convolution", "conv"),
        ("aten::embedding_bag", "embedding"),
        ("aten::_embedding_bag", "embedding"),
        ("aten::native_layer_norm", "normalization"),
        ("aten::_softmax", "softmax"),
        ("gloo:all_reduce", "communication"),
        ("aten::copy_", "copy"),
        ("aten::index_select", "indexing"),
        ("aten::mul", "elementwise"),
        ("aten::sum", "reduction"),
        ("Optimizer.step#SGD.step", "optimizer"),
    ],
)
def test_cpu_op_rules(op, category):
    assert classify_one(RULES, "cpu_op", op, op, op) == category


def test_memcpy_memset_are_memory():
    assert classify_one(RULES, "memcpy", "Memcpy HtoD (Pinned -> Device)") == "memory"
    assert classify_one(RULES, "memset", "Memset (Device)") == "memory"


def test_amd_tensile_kernels_are_gemm():
    a = analyze(hta_trace("amd_trace"))
    cijk = a.events[a.events["name"].str.startswith("Cijk_")]
    assert len(cijk) == 2 and set(cijk["category"]) == {"gemm"}
    assert not cijk["addressable"].any()


def test_nccl_trace_categories():
    a = analyze(hta_trace("nccl_parser_config"))
    ev = a.events
    assert set(ev.loc[ev["name"].str.startswith("ncclKernel"), "category"]) == {"communication"}
    cutlass_bwd = ev[
        ev["name"].str.contains("cutlass_80_tensorop_s1688gemm") & (ev["op"] == "aten::convolution_backward")
    ]
    assert len(cutlass_bwd) > 0 and set(cutlass_bwd["category"]) == {"conv"}
    assert set(ev.loc[ev["name"].str.contains("cudnn::bn_"), "category"]) == {"normalization"}
    assert a.unknown_kernels().empty


def test_user_rules_are_tried_first_and_policy_overrides(tmp_path):
    rules = tmp_path / "r.toml"
    rules.write_text('[[rule]]\ncategory = "my_gemm"\nkind = "kernel"\nkernel = "nvjet"\n')
    policy = tmp_path / "p.toml"
    policy.write_text("[addressable]\ngemm = true\nelementwise = false\nmy_gemm = false\n")
    r, p = load_classifier(rules, policy)
    assert classify_one(r, "kernel", "nvjet_tst_x", "aten::mm") == "my_gemm"
    assert p.is_addressable("gemm") and not p.is_addressable("elementwise") and not p.is_addressable("conv")
    # A new category is a decision the user writes down: its policy entry says whether it is addressable.
    assert not p.is_addressable("my_gemm")


def test_a_new_category_needs_a_policy_entry_and_a_policy_entry_a_rule(tmp_path):
    rules = tmp_path / "r.toml"
    rules.write_text('[[rule]]\ncategory = "my_gemm"\nkind = "kernel"\nkernel = "nvjet"\n')
    with pytest.raises(UserError, match=r"unknown category 'my_gemm'.*--policy"):
        load_rules(rules)
    policy = tmp_path / "p.toml"
    policy.write_text("[addressable]\nmy_gemm = false\n")
    with pytest.raises(UserError, match=r"unknown category 'my_gemm'.*--rules"):
        load_policy(policy)


@pytest.mark.parametrize(
    "text,problem",
    [
        ('[[rule]]\ncategory = "gemm"\nkernel = "("\n', "kernel: bad regex '('"),
        ('[[rule]]\ncategory = "gemm"\nkernal = "a"\n', "unknown field 'kernal' (did you mean 'kernel'?)"),
        ('[[rule]]\nkernel = "a"\n', "no 'category'"),
        ('[[rule]]\ncategory = "gemm"\n', "matches everything"),
        ('[[rule]]\ncategory = "gemm"\nkind = "kernal"\n', "unknown kind 'kernal' (did you mean 'kernel'?)"),
        ('[[rule]]\ncategory = "gemm"\nkernel = 5\n', "a regex must be a string"),
        ('[[rule]]\ncategory = "gemm"\nkernel = "(?<!fb)gemm"\n', "RE2 syntax: no look-around"),
        # The case: a one-letter typo made every GEMM addressable (33% -> 94%).
        ('[[rule]]\ncategory = "gemn"\nkernel = "gemm|nvjet"\n', "unknown category 'gemn' (did you mean 'gemm'?)"),
        ('[[rules]]\ncategory = "gemm"\nkernel = "x"\n', "unknown top-level key 'rules' (did you mean 'rule'?)"),
        ("rule = 3\n", "expected [[rule]]"),
        ("[[rule]\n", "invalid TOML"),
    ],
)
def test_bad_rules_files(tmp_path, text, problem):
    p = tmp_path / "r.toml"
    p.write_text(text)
    with pytest.raises(UserError) as e:
        load_rules(p)
    assert problem in str(e.value) and str(p) in str(e.value)


@pytest.mark.parametrize(
    "text,problem",
    [
        ('[addressable]\ngemm = "yes"\n', "addressable.gemm must be true or false"),
        ("[addressable]\nbanana = true\n", "unknown category 'banana' (one of: attention, communication"),
        ("[addressable]\nembeding = false\n", "unknown category 'embeding' (did you mean 'embedding'?)"),
        ("[addressable]\ngemm = true\nGEMM = false\n", "category 'gemm' is given twice"),
        ("addressable = 3\n", "expected an [addressable] table"),
        ("[adressable]\ngemm = true\n", "unknown top-level key 'adressable' (did you mean 'addressable'?)"),
    ],
)
def test_bad_policy_files(tmp_path, text, problem):
    p = tmp_path / "p.toml"
    p.write_text(text)
    with pytest.raises(UserError) as e:
        load_policy(p)
    assert problem in str(e.value) and str(p) in str(e.value)


def test_policy_and_rule_names_are_case_insensitive(tmp_path):
    # `GEMM = true` used to do nothing: the key did not match the category "gemm".
    p = tmp_path / "p.toml"
    p.write_text("[addressable]\nGEMM = true\n")
    assert load_policy(p).is_addressable("gemm")
    r = tmp_path / "r.toml"
    r.write_text('[[rule]]\ncategory = "Softmax"\nkind = "Kernel"\nkernel = "MY_SOFTMAX"\n')
    assert classify_one(load_rules(r), "kernel", "my_softmax_fwd") == "softmax"


@pytest.mark.parametrize(
    "make,problem",
    [
        (lambda d: d, "is a directory, expected a TOML file"),
        (
            lambda d: (d / "latin1.toml").write_bytes(b"[addressable]\n# caf\xe9\ngemm = true\n") and d / "latin1.toml",
            "not UTF-8 text (at byte offset 19)",
        ),
        (lambda d: d / "missing.toml", "no such file"),
    ],
)
def test_unreadable_rules_and_policy_files(tmp_path, make, problem):
    path = make(tmp_path)
    for load in (load_rules, load_policy):
        with pytest.raises(UserError) as e:
            load(path)
        assert problem in str(e.value) and str(path) in str(e.value)


def test_default_policy_follows_the_paper():
    p = load_policy()
    assert [c for c in ("gemm", "attention", "conv", "communication", "memory") if p.is_addressable(c)] == []
    assert all(
        p.is_addressable(c) for c in ("embedding", "elementwise", "normalization", "optimizer", "fused", "other")
    )


def test_search_memo_searches_each_pair_once_and_changes_no_answer():
    """The memo `classify_kernels` passes answers each (pattern, text) from one search, and every
    combination gets the category the plain search gives."""
    from headroom.trace.classify import SearchMemo

    searched: list[tuple[int, str]] = []

    class Counting(SearchMemo):
        def __call__(self, pattern, text):
            if (id(pattern), text) not in self._seen:
                searched.append((id(pattern), text))
            return super().__call__(pattern, text)

    memo = Counting()
    names = [n for n, _, _ in _AMBIGUOUS] * 3  # each text met three times
    ops = [o for _, o, _ in _AMBIGUOUS] * 3
    for name, op in zip(names, ops):
        assert classify_one(RULES, "kernel", name, op, op, found=memo) == classify_one(RULES, "kernel", name, op, op)
    assert len(searched) == len(set(searched))  # no pair searched twice
    assert 0 < len(searched) < sum(1 for _ in names) * 2 * len(RULES)
