import pytest

from headroom.trace.analysis import analyze
from headroom.trace.classify import classify_one, load_policy, load_rules
from headroom.errors import UserError
from tests.conftest import hta_trace

RULES = load_rules()


@pytest.mark.parametrize("name,op,category", [
    ("nvjet_tst_192x192_64x4_2x1_v_bz_coopA_NNT", "aten::mm", "gemm"),
    ("nvjet_tst_192x192_64x4_2x1_v_bz_coopA_NNT", "aten::cudnn_convolution", "conv"),
    ("void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>(...)", "aten::embedding", "embedding"),
    ("void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>(...)", "aten::index_select", "indexing"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t> >(Flash_fwd_params)", "aten::_flash_attention_forward", "attention"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "record_param_comms", "communication"),
    ("Cijk_Alik_Bljk_SB_MT64x16x32_MI16x16x1", "aten::addmm", "gemm"),
    ("triton_poi_fused_add_cos_sin_0", "triton_poi_fused_add_cos_sin_0", "fused"),
    ("triton_tem_fused_mm_0", "aten::mm", "gemm"),
    ("triton_poi_fused__scaled_dot_product_cudnn_attention__to_copy__unsafe_view_add_cos_0", "triton_poi_fused__scaled_dot_product_cudnn_attention__to_copy__unsafe_view_add_cos_0", "fused"),
    ("triton_red_fused__to_copy_add_embedding_mean_mul_pow_rsqrt_0", "triton_red_fused__to_copy_add_embedding_mean_mul_pow_rsqrt_0", "fused"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, float, float, float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(...)", "aten::_softmax", "softmax"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(...)", "aten::native_layer_norm", "normalization"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, ...)", "aten::fill_", "elementwise"),
    ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(...)", "aten::copy_", "copy"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<...FusedAdamMathFunctor...>", "aten::_fused_adam_", "optimizer"),
    ("void cub::DeviceRadixSortOnesweepKernel<...>", "aten::sort", "sort"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float> > >(...)", "aten::mean", "reduction"),
    ("fbgemm_gpu::split_embedding_codegen_forward_unweighted_kernel<...>", "fbgemm::split_embedding_codegen_lookup_sgd_function", "embedding"),
    ("void cub::DeviceRadixSortOnesweepKernel<...>", "torch::autograd::CppNode<SplitLookupFunction_sgd_Op>", "embedding"),
    ("some_brand_new_kernel_xyz", "aten::foo", "other"),
])
def test_rule_table_on_ambiguous_and_plain_names(name, op, category):
    assert classify_one(RULES, "kernel", name, op, op) == category


@pytest.mark.parametrize("op,category", [
    ("aten::addmm", "gemm"), ("aten::linear", "gemm"), ("aten::scaled_dot_product_attention", "attention"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"), ("aten::mkldnn_convolution", "conv"),
    ("aten::embedding_bag", "embedding"), ("aten::_embedding_bag", "embedding"), ("aten::native_layer_norm", "normalization"),
    ("aten::_softmax", "softmax"), ("gloo:all_reduce", "communication"), ("aten::copy_", "copy"),
    ("aten::index_select", "indexing"), ("aten::mul", "elementwise"), ("aten::sum", "reduction"),
    ("Optimizer.step#SGD.step", "optimizer"),
])
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
    cutlass_bwd = ev[ev["name"].str.contains("cutlass_80_tensorop_s1688gemm") & (ev["op"] == "aten::convolution_backward")]
    assert len(cutlass_bwd) > 0 and set(cutlass_bwd["category"]) == {"conv"}
    assert set(ev.loc[ev["name"].str.contains("cudnn::bn_"), "category"]) == {"normalization"}
    assert a.unknown_kernels().empty


def test_user_rules_are_tried_first_and_policy_overrides(tmp_path):
    rules = tmp_path / "r.toml"
    rules.write_text('[[rule]]\ncategory = "my_gemm"\nkind = "kernel"\nkernel = "nvjet"\n')
    r = load_rules(rules)
    assert classify_one(r, "kernel", "nvjet_tst_x", "aten::mm") == "my_gemm"
    policy = tmp_path / "p.toml"
    policy.write_text("[addressable]\ngemm = true\nelementwise = false\n")
    p = load_policy(policy)
    assert p.is_addressable("gemm") and not p.is_addressable("elementwise") and not p.is_addressable("conv")
    assert p.is_addressable("my_gemm")  # a category the policy does not name is addressable


@pytest.mark.parametrize("text,problem", [
    ('[[rule]]\ncategory = "x"\nkernel = "("\n', "bad kernel regex"),
    ('[[rule]]\ncategory = "x"\nkernal = "a"\n', "unknown field"),
    ('[[rule]]\nkernel = "a"\n', "no 'category'"),
    ('[[rule]]\ncategory = "x"\n', "matches everything"),
    ('[[rule]]\ncategory = "x"\nkind = "gpu"\n', "kind must be one of"),
    ("rule = 3\n", "expected [[rule]]"),
    ("[[rule]\n", "invalid TOML"),
])
def test_bad_rules_files(tmp_path, text, problem):
    p = tmp_path / "r.toml"
    p.write_text(text)
    with pytest.raises(UserError, match=problem.replace("[", r"\[").replace("(", r"\(")):
        load_rules(p)


def test_bad_policy_values(tmp_path):
    p = tmp_path / "p.toml"
    p.write_text('[addressable]\ngemm = "yes"\n')
    with pytest.raises(UserError, match="must be true or false"):
        load_policy(p)
    with pytest.raises(UserError, match="no such file"):
        load_policy(tmp_path / "missing.toml")


def test_default_policy_follows_the_paper():
    p = load_policy()
    assert [c for c in ("gemm", "attention", "conv", "communication", "memory") if p.is_addressable(c)] == []
    assert all(p.is_addressable(c) for c in ("embedding", "elementwise", "normalization", "optimizer", "fused", "other"))
