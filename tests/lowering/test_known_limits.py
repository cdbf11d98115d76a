"""Known limits of the pinned toolchain, matched from a failure's text and the model's operators."""

from __future__ import annotations

from ptebuild.errors import BuildError
from ptebuild.lowering.known_limits import KNOWN_LIMITS, explain


def test_each_failure_seen_on_the_toolchain_is_explained():
    seen = {  # failure lines as ExecuTorch 1.5.1 and torch 2.11/2.13 wrote them (cuda-notes.md, the issue)
        "cuda-attention-bfloat16": ("RuntimeError: Expected bfloat16 inputs", ["aten.scaled_dot_product_attention.default"]),
        "cuda-transposed-convolution": (
            "InductorError: LoweringException: NoValidChoicesError: No choices to select. Provided reason: No choices "
            "exist for backend. please consider adding ATEN into max_autotune_conv_backends config (defined in "
            "torch/_inductor/config.py)", ["aten.conv_transpose3d.input"]),
        "cuda-missing-fallback-kernel": ("RuntimeError: missing fallback kernels (1 total): aten._upsample_bilinear2d_aa.default", []),
        "executorch-runtime-torch-2.11": ("RuntimeError: tensor does not have a device", []),
        "cuda-attention-mask": (  # the chat decoder of manifests/chat_cuda.toml through ExecuTorch's LLM export, on the H200
            "RuntimeError: attn_mask head dimension must be 1 (broadcast over heads); per-head masks are not "
            "supported. Got attn_mask.shape=torch.Size([s11, 64])", ["aten.scaled_dot_product_attention.default"]),
    }
    for name, (text, operators) in seen.items():
        found = explain(text, operators, "cuda")
        assert found is not None and found.name == name, (name, found)
        assert "\n" not in found.advice() and found.advice().startswith("known limit of ")


def test_an_input_dtype_a_converter_has_no_type_for_is_explained():
    """Seen here: a uint8 image and a bfloat16 model lowered for Core ML and OpenVINO."""
    coreml = ('  File ".../coremltools/converters/mil/frontend/torch/exir_utils.py", line 60, in '
              "_construct_ct_tensor_type_from_torch\n    coreml_dtype = TORCH_DTYPE_TO_MIL_DTYPE[tensor.dtype]\n"
              "KeyError: torch.uint8")
    openvino = ('  File ".../openvino/frontend/pytorch/torchdynamo/compile.py", line 129, in openvino_compile\n'
                "KeyError: torch.bfloat16")
    found = explain(coreml, [], "coreml")
    assert found is not None and found.name == "coreml-input-dtype" and "not uint8, int8 or bfloat16" in found.advice()
    found = explain(openvino, [], "openvino")
    assert found is not None and found.name == "openvino-input-bfloat16"
    assert explain("KeyError: torch.uint8", [], "coreml") is None  # a KeyError of the model's own code
    assert explain(coreml, [], "xnnpack") is None


def test_an_operator_kept_for_xnnpack_in_a_cond_branch_is_explained():
    text = ("RuntimeError: Node aten_linear_default with op <EdgeOpOverload: aten.linear.default>: schema = "
            "aten::linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor was not decomposed or delegated.")
    found = explain(text, ["aten.gt.Scalar", "cond", "aten.linear.default"], "xnnpack")
    assert found is not None and found.name == "xnnpack-cond-branches" and "torch.where" in found.advice()
    assert explain(text, ["aten.linear.default"], "xnnpack") is None  # no torch.cond: another cause


def test_a_core_ml_model_with_state_names_the_target_it_needs():
    text = ("ValueError: State model is supported only >= iOS18. Please update the minimum_deployment_target to at "
            "least coremltools.target.iOS18")
    found = explain(text, [], "coreml")
    assert found is not None and 'minimum_deployment_target = "iOS18"' in found.advice()


def test_a_pt2e_quantized_model_with_state_is_explained():
    text = ("method 'forward' at {'batch': 1} output 0: the program computes something else than eager PyTorch: ...; "
            "the model updates buffers in place (mean) and is PT2E-quantized")
    found = explain(text, [], "xnnpack")
    assert found is not None and found.name == "xnnpack-pt2e-state" and "keep the state outside the model" in found.advice()


def test_the_model_and_the_backend_decide_too():
    text = "RuntimeError: Expected bfloat16 inputs"
    assert explain(text, ["aten.linear.default"], "cuda") is None  # a model without attention: not this limit
    assert explain(text, [], "cuda") is not None  # operators unknown: the text decides
    assert explain(text, [], "xnnpack") is None
    assert explain("ValueError: the policy needs a calibrated camera", [], "cuda") is None


def test_entries_say_what_to_do_and_names_are_unique():
    assert len({limit.name for limit in KNOWN_LIMITS}) == len(KNOWN_LIMITS)
    for limit in KNOWN_LIMITS:
        assert limit.what_to_do and limit.toolchain


def test_a_failed_check_gets_the_advice_on_its_line():
    from ptebuild.lowering.known_limits import explained

    error = BuildError("ExecuTorch's runtime failed to load method 'forward': RuntimeError: tensor does not have a device",
                       location="programs.p")
    again = explained(error, "portable")
    assert str(again) == (
        "programs.p: ExecuTorch's runtime failed to load method 'forward': RuntimeError: tensor does not have a device; "
        "known limit of ExecuTorch 1.5.1's pip runtime under torch 2.11: the wheel's native runtime was built against "
        "another torch: check portable and XNNPACK programs on a machine with torch 2.13 (CPU), and share the cache with it"
    )
    plain = BuildError("something else", location="programs.p")
    assert explained(plain, "portable") is plain


def test_the_advice_says_whether_upstream_fixed_it():
    """A limit no upstream change fixes yet says so, not "fixed upstream by no release yet"."""
    from ptebuild.lowering.known_limits import by_name

    advice = by_name("cuda-attention-bfloat16").advice()
    assert "fixed upstream by" not in advice
    assert advice.endswith("; not fixed upstream yet (executorch/backends/cuda/triton/kernels/sdpa.py refuses other dtypes)")


def test_a_bfloat16_depthwise_convolution_xnnpack_cannot_create_is_explained():
    # Seen: Qwen3.5's and LFM2's short convolutions in bfloat16 with enable_bf16, at the check's load.
    text = ("ExecuTorch's runtime failed to load qwen35s_bf16.pte: RuntimeError: Failed to load method forward, error: "
            "0x:1 (Internal); it logged: Failed to create depthwise convolution node 30 with code: "
            "xnn_status_invalid_parameter; XNNCompiler::compileModel failed: 0x1; Init failed for backend XnnpackBackend: 0x1")
    found = explain(text, [], "xnnpack")
    assert found is not None and found.name == "xnnpack-bfloat16-depthwise-convolution"
    assert "enable_bf16" in found.advice() and "float32" in found.advice()
    assert explain(text, [], "portable") is None


def test_a_quantized_pad_xnnpack_cannot_create_is_explained():
    # Seen: torchvision's swin_t with quantize = "int8", at the check's load (before backends/xnnpack/pad.py).
    text = ("ExecuTorch's runtime failed to load method 'forward': RuntimeError: Failed to load method forward, error: "
            "0x:1 (Internal); it logged: Failed to create StaticConstantPad node 182 with code: xnn_status_invalid_parameter; "
            "XNNCompiler::compileModel failed: 0x1; Init failed for backend XnnpackBackend: 0x1")
    found = explain(text, [], "xnnpack")
    assert found is not None and found.name == "xnnpack-quantized-pad" and found.applied_by_ptebuild == "backends/xnnpack/pad.py"
    assert "quantize = 'int8-dynamic'" in found.advice() and "swin_t" in found.advice()
