"""A flash-attention-style Triton kernel of our own, for tests/test_triton_aot.py to compile ahead of time.

The forward pass of FlashAttention-2 (Dao 2023, Algorithm 1) as flash-attn's Triton AMD backend and PyTorch's
AOTriton run it: one program per (query block, batch x head), K/V streamed in blocks, an online softmax (running
max ``m_i`` and sum ``l_i``), two ``tl.dot`` per block (QK^T and PV, the matrix-core work), causal masking, the
log-sum-exp written for the backward pass. Written here (not copied); the test also runs it in Triton's
interpreter on the CPU against PyTorch's attention, so what is compiled is a correct attention.

``@triton.jit`` needs its function in a real file, hence this module.
"""

from __future__ import annotations

import triton
import triton.language as tl

# ASTSource's signature: argument name -> Triton type ("constexpr" for the compile-time ones).
SIGNATURE = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "O": "*bf16", "LSE": "*fp32", "sm_scale": "fp32",
             "stride_h": "i32", "stride_m": "i32", "n_ctx": "i32",
             "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "HEAD_DIM": "constexpr", "CAUSAL": "constexpr"}
CONSTEXPRS = {"BLOCK_M": 64, "BLOCK_N": 64, "HEAD_DIM": 128, "CAUSAL": True}


@triton.jit
def attention_forward(Q, K, V, O, LSE, sm_scale, stride_h, stride_m, n_ctx,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                      CAUSAL: tl.constexpr):
    """O = softmax(Q K^T * sm_scale) V for one block of queries of one (batch x head); contiguous [bh, n, d]."""
    start_m = tl.program_id(0)
    head = tl.program_id(1)
    base = head * stride_h
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, HEAD_DIM)
    row_ok = rows[:, None] < n_ctx
    q = tl.load(Q + base + rows[:, None] * stride_m + dims[None, :], mask=row_ok, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    # A causal query block never looks past its own last row.
    end = tl.minimum((start_m + 1) * BLOCK_M, n_ctx) if CAUSAL else n_ctx
    for start_n in range(0, end, BLOCK_N):
        keys = start_n + cols
        kt = tl.load(K + base + keys[None, :] * stride_m + dims[:, None], mask=keys[None, :] < n_ctx, other=0.0)
        scores = tl.dot(q, kt) * sm_scale
        keep = keys[None, :] < n_ctx
        if CAUSAL:
            keep = keep & (rows[:, None] >= keys[None, :])
        scores = tl.where(keep, scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, 1))
        p = tl.exp(scores - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + base + keys[:, None] * stride_m + dims[None, :], mask=keys[:, None] < n_ctx, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    acc = acc / l_i[:, None]
    tl.store(O + base + rows[:, None] * stride_m + dims[None, :], acc.to(O.dtype.element_ty), mask=row_ok)
    tl.store(LSE + head * n_ctx + rows, m_i + tl.log(l_i), mask=rows < n_ctx)
