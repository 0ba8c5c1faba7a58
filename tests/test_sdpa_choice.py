"""The SDPA kernels attention may use on a GPU (:mod:`normzoo.nn.sdpa_choice`): the choice for
every case, dtype, head width and recipe override; the case each attention call is; the kernels
entered around SDPA (with a GPU's answer stood in on the CPU); the CPU path untouched; the
recipe key; and TorchDynamo tracing both paths without a graph break."""

from __future__ import annotations

import copy
import itertools

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend

import normzoo.nn.attention as attention_module
from normzoo.errors import ConfigError
from normzoo.models import assemble
from normzoo.models.config import ModelConfig
from normzoo.nn.attention import MultiheadAttention, attention_mask
from normzoo.nn.kv_cache import LayerCache
from normzoo.nn.sdpa_choice import (
    BACKEND_NAMES,
    AttentionCase,
    attention_case,
    first_backend_names,
    sdpa_backends,
)

FLASH, EFFICIENT = SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION
CUDNN, MATH = SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
UNMASKED = (AttentionCase.CAUSAL, AttentionCase.DECODE)
B, T, DIM, HEADS = 3, 7, 32, 4


def expected_first(case: AttentionCase, dtype: torch.dtype, override: str) -> SDPBackend:
    """What runs first at head width 64, as the issue's policy states it."""
    half = dtype != torch.float32
    default = FLASH if half and case in UNMASKED else EFFICIENT
    return {"auto": default, "flash": default, "efficient": EFFICIENT,
            "cudnn": CUDNN if half else default, "math": MATH}[override]


@pytest.mark.parametrize("case,dtype,override",
                         list(itertools.product(AttentionCase, DTYPES, BACKEND_NAMES)))
def test_every_case_dtype_and_override_on_a_gpu(case, dtype, override):
    chosen = sdpa_backends(case, "cuda", dtype, 64, override)
    assert chosen[0] == expected_first(case, dtype, override)
    assert chosen[-1] == MATH and len(set(chosen)) == len(chosen)  # math last, each once
    assert (CUDNN in chosen) == (override == "cudnn" and dtype != torch.float32)
    if case.masked or dtype == torch.float32:
        assert FLASH not in chosen  # no mask, half precision only
    if override == "math":
        assert chosen == [MATH]
    elif override != "auto":  # the named kernel first, then the default order as fallback
        rest = [k for k in sdpa_backends(case, "cuda", dtype, 64) if k != chosen[0]]
        assert chosen[1:] == rest


@pytest.mark.parametrize("override", BACKEND_NAMES)
@pytest.mark.parametrize("device", ["cpu", "mps", "meta"])
def test_nothing_is_chosen_off_a_gpu(device, override):
    for case, dtype in itertools.product(AttentionCase, DTYPES):
        assert sdpa_backends(case, device, dtype, 64, override) is None
    assert first_backend_names(device, torch.bfloat16, 64, override) is None


def test_the_default_order_in_full():
    bf16 = torch.bfloat16
    assert sdpa_backends(AttentionCase.CAUSAL, "cuda", bf16, 64) == [FLASH, EFFICIENT, MATH]
    assert sdpa_backends(AttentionCase.DECODE, "cuda", bf16, 64) == [FLASH, EFFICIENT, MATH]
    for case in (AttentionCase.SELF_PADDED, AttentionCase.CAUSAL_PADDED, AttentionCase.CROSS):
        assert sdpa_backends(case, "cuda", bf16, 64) == [EFFICIENT, MATH]
        assert sdpa_backends(case, "cuda", bf16, 64, "cudnn") == [CUDNN, EFFICIENT, MATH]
    assert sdpa_backends(AttentionCase.CAUSAL, "cuda", torch.float32, 64) == [EFFICIENT, MATH]


def test_head_widths_outside_a_kernel_s_limits():
    bf16, f32 = torch.bfloat16, torch.float32
    # flash up to 256; cuDNN up to 128 (its older limit) and a multiple of 8
    assert sdpa_backends(AttentionCase.CAUSAL, "cuda", bf16, 256)[0] == FLASH
    assert sdpa_backends(AttentionCase.CAUSAL, "cuda", bf16, 320) == [EFFICIENT, MATH]
    assert sdpa_backends(AttentionCase.CROSS, "cuda", bf16, 192, "cudnn") == [EFFICIENT, MATH]
    # memory-efficient: a multiple of 8 in half precision, of 4 in float32
    assert sdpa_backends(AttentionCase.SELF_PADDED, "cuda", bf16, 20) == [MATH]
    assert sdpa_backends(AttentionCase.CAUSAL, "cuda", bf16, 20) == [FLASH, MATH]
    assert sdpa_backends(AttentionCase.SELF_PADDED, "cuda", f32, 20) == [EFFICIENT, MATH]
    assert sdpa_backends(AttentionCase.SELF_PADDED, "cuda", f32, 6) == [MATH]


def test_first_backend_names_cover_every_case():
    names = first_backend_names("cuda", torch.bfloat16, 64)
    assert names == {"self-attention, key padding mask": "efficient", "causal, no mask": "flash",
                     "causal, padding mask": "efficient",
                     "cross-attention, source mask": "efficient",
                     "incremental decoding, query length 1": "flash"}


def test_the_case_of_a_call():
    assert attention_case(cross=True, causal=False, masked=True, query_len=5) is AttentionCase.CROSS
    assert attention_case(cross=False, causal=False, masked=True, query_len=5) is \
        AttentionCase.SELF_PADDED
    assert attention_case(cross=False, causal=True, masked=False, query_len=5) is \
        AttentionCase.CAUSAL
    assert attention_case(cross=False, causal=True, masked=True, query_len=5) is \
        AttentionCase.CAUSAL_PADDED
    assert attention_case(cross=False, causal=True, masked=False, query_len=1) is \
        AttentionCase.DECODE
    # a one-token step over left-padded keys has a mask: the padded causal case
    assert attention_case(cross=False, causal=True, masked=True, query_len=1) is \
        AttentionCase.CAUSAL_PADDED


# -- the module ----------------------------------------------------------------------------------


def _padding(length: int = T) -> torch.Tensor:
    mask = torch.zeros(B, length, dtype=torch.bool)
    mask[1, -3:] = True
    return mask


def _calls(module: MultiheadAttention, memory: torch.Tensor | None = None):
    """Each forward normzoo's models make, with its inputs and the case it is."""
    torch.manual_seed(1)
    x = torch.randn(B, T, DIM)
    if module.cross:
        return [("cross", lambda: module(x, memory, key_padding_mask=_padding(memory.shape[1])),
                 AttentionCase.CROSS)]

    def decode():
        cache = LayerCache()
        module(x[:, :4], causal=True, cache=cache)  # the prompt, then one token
        return module(x[:, 4:5], causal=True, cache=cache)

    return [("encoder", lambda: module(x, key_padding_mask=_padding()), AttentionCase.SELF_PADDED),
            ("causal", lambda: module(x, causal=True), AttentionCase.CAUSAL),
            ("causal padded", lambda: module(x, causal=True, key_padding_mask=_padding()),
             AttentionCase.CAUSAL_PADDED),
            ("decode", decode, AttentionCase.DECODE)]


def _modules():
    torch.manual_seed(0)
    yield MultiheadAttention(DIM, HEADS, impl="sdpa")
    yield MultiheadAttention(DIM, HEADS, impl="sdpa", cross=True)


def test_a_gpu_s_kernels_are_entered_around_each_call(monkeypatch):
    """With the GPU's answer stood in on the CPU: every call enters ``sdpa_kernel`` with the
    list chosen for its case, as a priority order, and computes what it computed before."""
    entered = []
    real_kernel = attention_module.sdpa_kernel

    def as_on_a_gpu(case, device_type, dtype, head_dim, override="auto"):
        return sdpa_backends(case, "cuda", dtype, head_dim, override)

    def spy(backends, set_priority=False):
        entered.append((list(backends), set_priority))
        return real_kernel(backends, set_priority=set_priority)

    memory = torch.randn(B, T + 2, DIM)
    for module in _modules():
        for name, call, case in _calls(module, memory):
            plain = call()
            with monkeypatch.context() as patch:
                patch.setattr(attention_module, "sdpa_backends", as_on_a_gpu)
                patch.setattr(attention_module, "sdpa_kernel", spy)
                entered.clear()
                chosen = call()
            assert entered[-1] == (sdpa_backends(case, "cuda", torch.float32, DIM // HEADS),
                                   True), name
            torch.testing.assert_close(chosen, plain, atol=1e-6, rtol=1e-5)


def test_on_a_cpu_no_kernel_is_chosen_and_every_override_computes_the_same(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("sdpa_kernel entered on a CPU")

    monkeypatch.setattr(attention_module, "sdpa_kernel", refuse)
    memory = torch.randn(B, T + 2, DIM)
    for module in _modules():
        outputs = {}
        for backend in BACKEND_NAMES:
            twin = copy.deepcopy(module)
            twin.backend = backend
            outputs[backend] = [call() for _, call, _ in _calls(twin, memory)]
        for backend in BACKEND_NAMES:
            for got, want in zip(outputs[backend], outputs["auto"], strict=True):
                assert torch.equal(got, want)


def test_on_a_cpu_the_output_is_torch_s_sdpa_as_before():
    """The padded self-attention of an encoder, computed by hand with F.sdpa as the module did
    before a kernel was ever chosen: bit for bit the same."""
    torch.manual_seed(2)
    module = MultiheadAttention(DIM, HEADS, impl="sdpa").eval()
    x, padding = torch.randn(B, T, DIM), _padding()
    q, k, v = (t.view(B, T, HEADS, DIM // HEADS).transpose(1, 2)
               for t in module.qkv_proj(x).split(DIM, dim=-1))
    mask = attention_mask(padding, False, T, T, x.device)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0)
    want = module.out_proj(want.transpose(1, 2).reshape(B, T, DIM))
    assert torch.equal(module(x, key_padding_mask=padding), want)
    causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    causal = module.out_proj(causal.transpose(1, 2).reshape(B, T, DIM))
    assert torch.equal(module(x, causal=True), causal)


@pytest.mark.parametrize("as_on_a_gpu", [False, True], ids=["cpu path", "gpu path"])
def test_torch_compile_traces_the_forward_without_a_graph_break(monkeypatch, as_on_a_gpu):
    if as_on_a_gpu:  # the sdpa_kernel context around SDPA, traced on CPU tensors
        monkeypatch.setattr(attention_module, "sdpa_backends",
                            lambda case, device, dtype, hd, override="auto":
                            sdpa_backends(case, "cuda", dtype, hd, override))
    torch._dynamo.reset()
    module = MultiheadAttention(DIM, HEADS, impl="sdpa")
    x, padding = torch.randn(B, T, DIM), _padding()
    for kwargs in ({"key_padding_mask": padding}, {"causal": True}):
        explained = torch._dynamo.explain(lambda x, kw=kwargs: module(x, **kw))(x)
        assert explained.graph_break_count == 0, explained.break_reasons
        assert explained.graph_count == 1
    torch._dynamo.reset()


# -- the recipe ----------------------------------------------------------------------------------


def test_the_recipe_key_reaches_every_attention_module():
    for backend in BACKEND_NAMES:
        model = assemble({"family": "encoder_decoder", "vocab_size": 20, "d_model": 16,
                          "heads": 2, "ffn_dim": 32, "encoder_layers": 1, "decoder_layers": 1,
                          "attention_backend": backend})
        found = {m.backend for m in model.modules() if isinstance(m, MultiheadAttention)}
        assert found == {backend}


def test_the_recipe_refuses_an_unknown_kernel_and_one_the_explicit_path_never_runs():
    with pytest.raises(ConfigError, match=r"model\.attention_backend: Input should be 'auto', "
                                          r"'flash', 'efficient', 'cudnn' or 'math'"):
        ModelConfig.parse({"attention_backend": "xformers"})
    with pytest.raises(ConfigError, match=r"model\.attention_backend: flash names an SDPA kernel, "
                                          r"but attention_impl: explicit never runs SDPA"):
        ModelConfig.parse({"attention_backend": "flash", "attention_impl": "explicit"})
    assert ModelConfig.parse({"attention_impl": "explicit"}).attention_backend == "auto"
    with pytest.raises(ValueError, match="backend 'fast'"):
        MultiheadAttention(DIM, HEADS, backend="fast")
